"""SWAG, multiple choice beyond GLUE, under GLUE's fixed protocol (`eval.tasks=[swag]`).

Each example is a context and four endings; the model reads the four (context, ending) pairs as GLUE reads a
sentence pair, `[CLS] sent1 [SEP] sent2 ending [SEP]`, scores each from its [CLS] with one output (the GLUE
classifier with one label: the same pooler and head in every code path), and a softmax over the four picks
one, as transformers' *ForMultipleChoice models do. Scored by accuracy on the validation split, reported
apart from the GLUE average. Kept (eval.save_models) as the multiple-choice model of its architecture.

Data: the hub's `allenai/swag` ("regular"), or the official CSV files `<data_dir>/SWAG/{train,val}.csv`, read
as tables.py reads CSV (its malformed-row rule included).
"""

import logging
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn
from transformers.modeling_outputs import MultipleChoiceModelOutput

from cramming.errors import CrammingError
from cramming.eval.batching import EncodedSplit
from cramming.eval.parameter_efficient import merged
from cramming.eval.tasks.base import DataMissing, EvalSplit, Task, TaskData, load_splits
from cramming.eval.tasks.tables import Malformed, read_table
from cramming.library_noise import without_load_report

log = logging.getLogger(__name__)

HUB_PATH, HUB_CONFIG = "allenai/swag", "regular"
CHOICES = 4
ENDINGS = tuple(f"ending{k}" for k in range(CHOICES))
COLUMNS = ("sent1", "sent2", *ENDINGS, "label")  # of the official CSV header (it has more: video-id, ...)


@dataclass
class ChoiceSplit:
    """The examples of one split: a context (sent1), the start of every ending (sent2), four endings."""

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
    import datasets

    try:
        dataset = datasets.load_dataset(HUB_PATH, HUB_CONFIG, split=split)
    except Exception as error:  # offline, unknown split, hub errors: all mean "not available here"
        first_line = (str(error).strip().splitlines() or [""])[0]
        raise DataMissing(f"{HUB_PATH}/{HUB_CONFIG} split {split}: {type(error).__name__}: {first_line}",
                          cause=f"{HUB_PATH} from the hub: {type(error).__name__}: {first_line}")
    source = f"{HUB_PATH}/{HUB_CONFIG}:{split}"
    labels = list(dataset["label"])
    if not labels:
        raise CrammingError(f"{source}: no examples")
    bad = next((label for label in labels if label not in range(CHOICES)), None)
    if bad is not None:
        raise CrammingError(f"{source}: label {bad!r} is not one of 0-{CHOICES - 1}")
    endings = list(zip(*(dataset[name] for name in ENDINGS)))
    return ChoiceSplit(list(dataset["sent1"]), list(dataset["sent2"]), endings, labels, source)


class MultipleChoice(nn.Module):
    """A one-output GLUE classifier (`scorer`) as a multiple-choice model: each choice scored from its [CLS],
    cross-entropy over the choices."""

    def __init__(self, scorer: nn.Module):
        super().__init__()
        self.scorer = scorer

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, labels=None):
        """input_ids, attention_mask, token_type_ids (B, choices, T); labels (B,) the right choice;
        logits (B, choices)."""
        B, choices, T = input_ids.shape
        inputs = {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids}
        flat = {key: value.reshape(B * choices, T) for key, value in inputs.items() if value is not None}
        logits = self.scorer(**flat).logits.view(B, choices)  # (B * choices, 1) -> (B, choices)
        loss = None if labels is None else F.cross_entropy(logits.float(), labels)
        return MultipleChoiceModelOutput(loss=loss, logits=logits)


class Swag(Task):
    name = "swag"
    eval_splits = (EvalSplit("swag", "val.csv", "validation"),)
    metric = "accuracy"  # of the argmax over the choices' scores
    head = "a multiple-choice head"

    def load(self, data_dir: Optional[str], max_malformed_fraction: float) -> TaskData:
        """Train and validation splits, from `<data_dir>/SWAG/` (CSV) or the hub."""
        return load_splits(self, "SWAG", data_dir, "train.csv",
                           lambda path: read_csv_split(path, max_malformed_fraction), load_hub_split)

    def encode(self, split: ChoiceSplit, tokenizer, max_length: int) -> EncodedSplit:
        """Each example as its four pairs [CLS] sent1 [SEP] sent2 ending [SEP], truncated as GLUE's pairs are:
        input_ids[i] is a list of four token lists (batching pads them to (B, 4, T))."""
        first = [context for context in split.contexts for _ in range(CHOICES)]
        second = [f"{start} {ending}".strip() for start, endings in zip(split.starts, split.endings)
                  for ending in endings]
        encoded = tokenizer(first, second, truncation=True, max_length=max_length)

        def grouped(rows: list[list[int]]) -> list[list[list[int]]]:
            return [rows[i : i + CHOICES] for i in range(0, len(rows), CHOICES)]

        token_types = encoded.get("token_type_ids") if "token_type_ids" in tokenizer.model_input_names else None
        labels = torch.tensor(split.labels, dtype=torch.int64)
        types = None if token_types is None else grouped(token_types)
        return EncodedSplit(grouped(encoded["input_ids"]), labels, split.source, types)

    def model(self, encoder, dropout: float, seed: int, lora=None) -> nn.Module:
        return MultipleChoice(encoder.classifier(1, dropout, seed, lora))

    def save(self, model: MultipleChoice, encoder, folder: Path) -> None:
        """The one-output scorer as the encoder saves a classifier, then read back as the multiple-choice model
        of its architecture, which holds the same weights (ours, BERT's: checked key by key). An architecture
        whose multiple-choice model has another head (RoBERTa's reads the pooler, its classifier does not)
        keeps the scorer as a one-output sequence classifier, and a warning says so."""
        with tempfile.TemporaryDirectory() as scorer:
            encoder.save(merged(model.scorer).cpu(), Path(scorer))
            shutil.copytree(scorer, folder, dirs_exist_ok=True)  # the tokenizer (and remote code) with it
            choices, differ = _as_multiple_choice(Path(scorer))
        if differ:
            log.warning("%s: the multiple-choice model of its architecture does not hold the scorer SWAG trained "
                        "(%s): kept as a one-output sequence classifier", folder, ", ".join(differ[:3]))
            return
        choices.config.problem_type = None  # the scorer's "regression" (one output) says nothing here
        choices.save_pretrained(folder)

    def saved_model(self, folder: Path) -> Optional[nn.Module]:
        from transformers import AutoModelForMultipleChoice

        from cramming.model.quantize import auto_class

        if auto_class(folder) is not AutoModelForMultipleChoice:
            return None
        return AutoModelForMultipleChoice.from_pretrained(folder, trust_remote_code=True)


def _as_multiple_choice(folder: Path) -> tuple[Optional[nn.Module], list[str]]:
    """The one-output classifier in `folder` loaded as AutoModelForMultipleChoice, and what did not fit: the
    weights either lacks or leaves unused or has in another shape (all empty: the same model)."""
    from transformers import AutoModelForMultipleChoice

    try:
        with without_load_report():
            model, report = AutoModelForMultipleChoice.from_pretrained(folder, trust_remote_code=True,
                                                                       output_loading_info=True)
    except ValueError as error:  # the architecture has no multiple-choice class
        return None, [str(error).strip().splitlines()[0]]
    kinds = ("missing_keys", "unexpected_keys", "mismatched_keys")
    return model, [str(key[0] if isinstance(key, tuple) else key) for kind in kinds for key in report[kind]]
