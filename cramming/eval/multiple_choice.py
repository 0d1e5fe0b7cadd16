"""SWAG, multiple choice beyond GLUE, under GLUE's fixed protocol (`eval.tasks=[swag]`).

Each example is a context and four endings; the model reads the four (context, ending) pairs as GLUE reads a
sentence pair, `[CLS] sent1 [SEP] sent2 ending [SEP]`, scores each from its [CLS] with one output (the GLUE
classifier with one label: the same pooler and head in every code path), and a softmax over the four picks
one, as transformers' *ForMultipleChoice models do. Scored by accuracy on the validation split, reported
apart from the GLUE average.

Data: the hub's `allenai/swag` ("regular"), or the official CSV files `<data_dir>/SWAG/{train,val}.csv`.
Malformed CSV rows follow the TSV rule of the GLUE reader: up to floor(eval.max_malformed_fraction * rows)
are skipped and reported, more is an error naming the file, the line and the value.
"""

import csv
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PreTrainedTokenizerBase
from transformers.modeling_outputs import MultipleChoiceModelOutput

from cramming.errors import CrammingError
from cramming.eval.batching import EncodedSplit
from cramming.eval.data import EvalSplit, GlueDataMissing, GlueTaskData, check_malformed, load_splits


HUB_PATH, HUB_CONFIG = "allenai/swag", "regular"
FOLDER = "SWAG"
CHOICES = 4
ENDINGS = tuple(f"ending{k}" for k in range(CHOICES))
COLUMNS = ("sent1", "sent2", *ENDINGS, "label")  # of the official CSV header (it has more: video-id, ...)


@dataclass(frozen=True)
class ChoiceTask:
    """A multiple-choice task: the same fields run.py reads of a GlueTask."""

    name: str
    folder: str
    eval_splits: tuple[EvalSplit, ...]
    num_labels: int = 1  # outputs of the classifier: one score per (context, ending) pair


TASKS = {"swag": ChoiceTask("swag", FOLDER, (EvalSplit("swag", "val.csv", "validation"),))}
MAIN_METRIC = {"swag": "accuracy"}  # scored splits and their metric: never in the GLUE average


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
    """One official SWAG CSV file (quoted CSV, header row). A row with the wrong number of fields or a label
    that is not 0-3 is malformed: up to floor(max_malformed_fraction * rows) are skipped and counted, more is
    an error naming the file and the first bad line."""
    contexts, starts, endings, labels, malformed = [], [], [], [], []
    first_problem = ""
    try:
        with open(path, encoding="utf-8-sig", newline="") as file:
            reader = csv.reader(file)
            header = next(reader, None)
            if header is None:
                raise CrammingError(f"{path}: no examples (an empty file)")
            absent = [name for name in COLUMNS if name not in header]
            if absent:
                raise CrammingError(f"{path}, line 1: the header lacks the column(s) {', '.join(absent)}")
            column = {name: header.index(name) for name in COLUMNS}
            line = reader.line_num + 1  # where the next row starts (a quoted field may span lines)
            for fields in reader:
                problem = _row_problem(fields, len(header), column["label"])
                if problem:
                    malformed.append(line)
                    first_problem = first_problem or f"{path}, line {line}: {problem}"
                else:
                    contexts.append(fields[column["sent1"]])
                    starts.append(fields[column["sent2"]])
                    endings.append(tuple(fields[column[name]] for name in ENDINGS))
                    labels.append(int(fields[column["label"]]))
                line = reader.line_num + 1
    except UnicodeDecodeError as error:
        raise CrammingError(f"{path}: not valid UTF-8 ({error.reason} at byte {error.start})") from None
    except csv.Error as error:
        raise CrammingError(f"{path}, line {reader.line_num}: not readable as CSV ({error})") from None

    check_malformed(path, len(labels), malformed, first_problem, max_malformed_fraction, "(only a header)")
    return ChoiceSplit(contexts, starts, endings, labels, str(path), malformed)


def _row_problem(fields: list[str], width: int, label_column: int) -> str:
    """Why a row cannot be used, or "" when it can."""
    if len(fields) != width:
        return f"expected {width} comma-separated fields, found {len(fields)}"
    label = fields[label_column]
    if label not in {str(k) for k in range(CHOICES)}:
        return f"label {label!r} is not one of 0-{CHOICES - 1}"
    return ""


def load_hub_split(task: ChoiceTask, split: str) -> ChoiceSplit:
    """One split of `allenai/swag` ("regular") through `datasets.load_dataset` (downloaded once, cached)."""
    import datasets

    try:
        dataset = datasets.load_dataset(HUB_PATH, HUB_CONFIG, split=split)
    except Exception as error:  # offline, unknown split, hub errors: all mean "not available here"
        first_line = (str(error).strip().splitlines() or [""])[0]
        raise GlueDataMissing(f"{HUB_PATH}/{HUB_CONFIG} split {split}: {type(error).__name__}: {first_line}")
    source = f"{HUB_PATH}/{HUB_CONFIG}:{split}"
    labels = list(dataset["label"])
    if not labels:
        raise CrammingError(f"{source}: no examples")
    bad = next((label for label in labels if label not in range(CHOICES)), None)
    if bad is not None:
        raise CrammingError(f"{source}: label {bad!r} is not one of 0-{CHOICES - 1}")
    endings = list(zip(*(dataset[name] for name in ENDINGS)))
    return ChoiceSplit(list(dataset["sent1"]), list(dataset["sent2"]), endings, labels, source)


def load_task(task: ChoiceTask, data_dir: Optional[str], max_malformed_fraction: float) -> GlueTaskData:
    """Train and validation splits, from `<data_dir>/SWAG/` (CSV) or the hub, as GLUE's GlueTaskData.

    Raises GlueDataMissing when the training data or the validation split is absent.
    """
    return load_splits(task, data_dir, "train.csv",
                       lambda path: read_csv_split(path, max_malformed_fraction),
                       lambda hub_split: load_hub_split(task, hub_split))


def encode_split(split: ChoiceSplit, tokenizer: PreTrainedTokenizerBase, max_length: int) -> EncodedSplit:
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
