"""Text classification: one text or a pair of texts to one of `labels`, or with no labels to a score
(regression, one output). GLUE's tasks and a user's own are this kind of task; they differ in where their
examples come from.

The model reads `[CLS] a [SEP] b [SEP]` and predicts from the [CLS] position (the encoder's classifier: the
same pooler and head in every code path); what it trained is saved as a transformers sequence classifier.
"""

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Optional, Union

import torch
from torch import nn

from cramming.eval.batching import EncodedSplit
from cramming.eval.parameter_efficient import merged
from cramming.eval.tasks.base import Task
from cramming.eval.tasks.tables import Malformed, read_table
from cramming.model.quantize import auto_class


@dataclass
class TextSplit:
    """The examples of one split, column-wise."""

    per_example: ClassVar[tuple[str, ...]] = ("text_a", "text_b", "labels")  # base.take
    text_a: list[str]
    text_b: Optional[list[str]]
    labels: list[Union[int, float]]
    source: str  # file path or hub split, for messages
    skipped_rows: list[int] = field(default_factory=list)  # 1-based line numbers of tolerated malformed rows

    def __len__(self) -> int:
        return len(self.labels)


def encode_split(split: TextSplit, tokenizer, max_length: int, regression: bool) -> EncodedSplit:
    """Segment ids are kept where the tokenizer's model reads them (its model_input_names)."""
    encoded = tokenizer(split.text_a, split.text_b, truncation=True, max_length=max_length)
    labels = torch.tensor(split.labels, dtype=torch.float32 if regression else torch.int64)
    token_types = encoded.get("token_type_ids") if "token_type_ids" in tokenizer.model_input_names else None
    return EncodedSplit(encoded["input_ids"], labels, split.source, token_types)


class TextClassification(Task):
    """Subclasses set, besides a Task's attributes, `labels` (the label strings in the order of their ids;
    None: a score), `score_range` (a score's allowed values), and for their files `text_columns` (first,
    second or None) and `label_column`."""

    labels: Optional[tuple[str, ...]]
    text_columns: tuple[str, Optional[str]]
    label_column: str
    score_range = (-math.inf, math.inf)
    implied_header: Optional[tuple[str, ...]] = None  # the columns of files without a header row (CoLA)

    @property
    def num_labels(self) -> int:
        """Outputs of the classification head; 1 means regression."""
        return len(self.labels) if self.labels is not None else 1

    def parse_label(self, text: str) -> Union[int, float]:
        """A file's label string as the label id (or the score); Malformed if it is none of them."""
        if self.labels is not None:
            if text in self.labels:
                return self.labels.index(text)
            raise Malformed(f"label {text!r} is not {' or '.join(self.labels)}")
        try:
            score = float(text)
        except ValueError:
            score = math.nan
        low, high = self.score_range
        if math.isfinite(score) and low <= score <= high:  # "nan" parses as a float
            return score
        expected = f"a score between {low:g} and {high:g}" if math.isfinite(high - low) else "a number"
        raise Malformed(f"label {text!r} is not {expected}")

    def read_file(self, path: Path, max_malformed_fraction: float) -> TextSplit:
        """One TSV or CSV file of the task (tables.py)."""
        first, second = self.text_columns
        columns = [name for name in (first, second, self.label_column) if name is not None]

        def parse(row: dict[str, str]) -> tuple:
            return row[first], row[second] if second else None, self.parse_label(row[self.label_column])

        examples, skipped = read_table(path, columns, parse, max_malformed_fraction, self.implied_header)
        text_a, text_b, labels = (list(column) for column in zip(*examples)) if examples else ([], [], [])
        return TextSplit(text_a, text_b if second else None, labels, str(path), skipped)

    def encode(self, split: TextSplit, tokenizer, max_length: int) -> EncodedSplit:
        return encode_split(split, tokenizer, max_length, regression=self.num_labels == 1)

    def model(self, encoder, dropout: float, seed: int, lora=None) -> nn.Module:
        return encoder.classifier(self.num_labels, dropout, seed, lora)

    def save(self, model: nn.Module, encoder, folder: Path) -> None:
        encoder.save(merged(model).cpu(), folder)

    @property
    def head(self) -> str:
        return f"a {self.num_labels}-label head"

    def saved_model(self, folder: Path) -> Optional[nn.Module]:
        from transformers import AutoModelForSequenceClassification  # noqa: PLC0415 -- the registry imports this file

        if auto_class(folder) is not AutoModelForSequenceClassification:
            return None
        # an int8 copy's config.json carries its quantization_config: transformers loads it through torchao
        model = AutoModelForSequenceClassification.from_pretrained(folder, trust_remote_code=True)
        return model if getattr(model.config, "num_labels", None) == self.num_labels else None
