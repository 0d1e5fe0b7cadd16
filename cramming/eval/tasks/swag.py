"""SWAG, multiple choice beyond GLUE, under GLUE's fixed protocol (`eval.tasks=[swag]`).

Each example is a context and four endings; the model reads the four (context, ending) pairs as GLUE reads a
sentence pair, `[CLS] sent1 [SEP] sent2 ending [SEP]`, and a softmax over their scores picks one
(multiple_choice.py). Scored by accuracy on the validation split, reported apart from the GLUE average.

Data: the hub's `allenai/swag` ("regular"), or the official CSV files `<data_dir>/SWAG/{train,val}.csv`, read
as tables.py reads CSV (its malformed-row rule included).
"""

from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Optional

from cramming.errors import CrammingError
from cramming.eval.batching import EncodedSplit
from cramming.eval.tasks.base import EvalSplit, TaskData, load_hub, load_splits
from cramming.eval.tasks.multiple_choice import ChoiceTask, encode_choices
from cramming.eval.tasks.tables import Malformed, read_table

HUB_PATH, HUB_CONFIG = "allenai/swag", "regular"
CHOICES = 4
ENDINGS = tuple(f"ending{k}" for k in range(CHOICES))
COLUMNS = ("sent1", "sent2", *ENDINGS, "label")  # of the official CSV header (it has more: video-id, ...)


@dataclass
class ChoiceSplit:
    """The examples of one split: a context (sent1), the start of every ending (sent2), four endings."""

    per_example: ClassVar[tuple[str, ...]] = ("contexts", "starts", "endings", "labels")  # base.take
    contexts: list[str]
    starts: list[str]
    endings: list[tuple[str, ...]]
    labels: list[int]  # the right ending, 0-3
    source: str  # file path or hub split, for messages
    skipped_rows: list[int] = field(default_factory=list)  # 1-based first lines of tolerated malformed rows

    def __len__(self) -> int:
        return len(self.labels)


def read_csv_split(path: Path, max_malformed_fraction: float) -> ChoiceSplit:
    """One official SWAG CSV file (quoted CSV, header row); a label that is not 0-3 makes a row malformed."""

    def parse(row: dict[str, str]) -> tuple:
        if row["label"] not in {str(k) for k in range(CHOICES)}:
            raise Malformed(f"label {row['label']!r} is not one of 0-{CHOICES - 1}")
        return row["sent1"], row["sent2"], tuple(row[name] for name in ENDINGS), int(row["label"])

    examples, skipped = read_table(path, COLUMNS, parse, max_malformed_fraction)
    contexts, starts, endings, labels = (list(column) for column in zip(*examples)) if examples else ([],) * 4
    return ChoiceSplit(contexts, starts, endings, labels, str(path), skipped)


def load_hub_split(split: str) -> ChoiceSplit:
    """One split of `allenai/swag` ("regular") through `datasets.load_dataset` (downloaded once, cached)."""
    dataset = load_hub(HUB_PATH, HUB_CONFIG, split)
    source = f"{HUB_PATH}/{HUB_CONFIG}:{split}"
    labels = list(dataset["label"])
    if not labels:
        raise CrammingError(f"{source}: no examples")
    bad = next((label for label in labels if label not in range(CHOICES)), None)
    if bad is not None:
        raise CrammingError(f"{source}: label {bad!r} is not one of 0-{CHOICES - 1}")
    endings = list(zip(*(dataset[name] for name in ENDINGS)))
    return ChoiceSplit(list(dataset["sent1"]), list(dataset["sent2"]), endings, labels, source)


class Swag(ChoiceTask):
    name = "swag"
    eval_splits = (EvalSplit("swag", "val.csv", "validation"),)
    metric = "accuracy"  # of the argmax over the choices' scores

    def load(self, data_dir: Optional[str], max_malformed_fraction: float) -> TaskData:
        """Train and validation splits, from `<data_dir>/SWAG/` (CSV) or the hub."""
        return load_splits(self, "SWAG", data_dir, "train.csv",
                           lambda path: read_csv_split(path, max_malformed_fraction), load_hub_split)

    def encode(self, split: ChoiceSplit, tokenizer, max_length: int) -> EncodedSplit:
        """Each example as its four pairs [CLS] sent1 [SEP] sent2 ending [SEP], truncated as GLUE's pairs are:
        input_ids[i] is a list of four token lists (batching pads them to (B, 4, T))."""
        endings = [tuple(f"{start} {ending}".strip() for ending in endings)
                   for start, endings in zip(split.starts, split.endings)]
        return encode_choices(split.contexts, endings, split.labels, tokenizer, max_length, split.source)
