"""SuperGLUE under GLUE's fixed protocol: what its tasks share (the official JSON-lines files or the hub's
`aps/super_glue`, the examples, the leaderboard's submission files, the SuperGLUE score) and its text-pair
classification tasks, BoolQ, CB, WiC, WSC and the diagnostics AX-b and AX-g, which differ only in their fields
and labels (so each is a few class attributes here, as GLUE's nine are in glue.py). COPA, MultiRC and ReCoRD
score candidates and have files of their own (copa.py, multirc.py, record.py). SuperGLUE's RTE is GLUE's
`rte` (the same data).

Each example is read as the original Cramming code reads it: its fields in the original's order, all but the
last joined by the tokenizer's separator as the first segment, the last as the second: `[CLS] question [SEP]
passage [SEP]` (BoolQ), `[CLS] word [SEP] sentence1 [SEP] sentence2 [SEP]` (WiC), `[CLS] text [SEP] span1_index
[SEP] span2_index [SEP] span1_text [SEP] span2_text [SEP]` (WSC, the `wsc.fixed` form). AX-b and AX-g have no
training data: as in SuperGLUE and the original, each is scored by a model fine-tuned on RTE's training split.
One concept, SuperGLUE's shared ground and the tasks that differ from it only in their attributes.
"""

import json
import logging
from abc import abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Optional

import numpy as np
import torch

from cramming.errors import CrammingError
from cramming.eval import metrics
from cramming.eval.batching import EncodedSplit
from cramming.eval.finetune import predict
from cramming.eval.tasks.base import DataMissing, EvalSplit, Task, TaskData, load_hub, load_splits
from cramming.eval.tasks.classification import TextClassification
from cramming.eval.tasks.jsonl import label_of, read_jsonl
from cramming.eval.tasks.multiple_choice import joined, token_types_of
from cramming.eval.tasks.tables import Malformed

log = logging.getLogger(__name__)

HUB_PATH = "aps/super_glue"  # the maintained copy of the hub's `super_glue` (parquet), one config a task


@dataclass
class Row:
    """One example as a task reads it: its fields in the task's order, its label id (0 in a test split), the
    official idx a submission names it by, and for ReCoRD the right answers of its query."""

    texts: tuple[str, ...]
    label: int
    idx: Any
    answers: tuple[str, ...] = ()


@dataclass
class Examples:
    """The examples of one split."""

    per_example: ClassVar[tuple[str, ...]] = ("rows",)  # base.take
    rows: list[Row]
    source: str  # file path or hub split, for messages
    skipped_rows: list[int] = field(default_factory=list)  # lines of tolerated malformed ones

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def labels(self) -> list[int]:
        return [row.label for row in self.rows]


def hub_label(value: Any, count: int, source: str, row: int) -> int:
    """A labelled hub split's label id, checked: GLUE's rule for a label out of range."""
    if value not in range(count):
        raise CrammingError(f"{source}, row {row}: label {value!r} is out of range (0-{count - 1})")
    return value


class SuperGlueTask(Task):
    """What every SuperGLUE task shares: its folder of the official layout and hub config, the examples read
    from either, its leaderboard file. Subclasses read a file's objects (`rows`) and the hub's columns
    (`hub_rows`) into Rows, and write a prediction as the leaderboard takes it (`submission_records`)."""

    folder: str  # of the official layout: BoolQ, CB, ...
    hub_config: str  # of aps/super_glue
    submission: str  # the leaderboard's file name, <submission>.jsonl
    in_superglue_score = True  # AX-b and AX-g are diagnostics outside the score
    leaderboard = "SuperGLUE"
    train_folder: Optional[str] = None  # where the training data is, when not `folder` (the diagnostics: RTE)
    train_hub_config: Optional[str] = None

    @property
    def eval_splits(self) -> tuple[EvalSplit, ...]:
        return (EvalSplit(self.name, f"{self.folder}/val.jsonl", "validation"),)

    @property
    def test_file(self) -> str:
        return f"{self.folder}/test.jsonl"

    @abstractmethod
    def rows(self, record: dict, training: bool, labelled: bool) -> list[Row]:
        """The examples of one object of a file (Malformed, KeyError or TypeError when it cannot be read)."""

    @abstractmethod
    def hub_rows(self, dataset, training: bool, labelled: bool, source: str) -> list[Row]:
        """The examples of a hub split."""

    @abstractmethod
    def submission_records(self, test: Examples, outputs: torch.Tensor) -> list[dict]:
        """The leaderboard's objects for the model's outputs on the test split."""

    def load(self, data_dir: Optional[str], max_malformed_fraction: float) -> TaskData:
        """The training split and the validation split (the diagnostics: their one labelled file), from the
        official files under `data_dir` or from the hub."""
        train = f"{self.train_folder or self.folder}/train.jsonl"

        def read_file(path: Path) -> Examples:
            return self.read_file(path, max_malformed_fraction, training=str(path).endswith(train))

        return load_splits(self, "", data_dir, train, read_file,
                           lambda split: self.read_hub(split, training=split == "train"))

    def read_file(self, path: Path, max_malformed_fraction: float, training: bool, labelled: bool = True) -> Examples:
        rows, skipped = read_jsonl(path, lambda record: self.rows(record, training, labelled), max_malformed_fraction)
        if not rows:
            raise CrammingError(f"{path}: no examples")
        return Examples(rows, str(path), skipped)

    def read_hub(self, split: str, training: bool, labelled: bool = True) -> Examples:
        config = (self.train_hub_config or self.hub_config) if training else self.hub_config
        dataset = load_hub(HUB_PATH, config, split)
        source = f"{HUB_PATH}/{config}:{split}"
        rows = self.hub_rows(dataset, training, labelled, source)
        if not rows:
            raise CrammingError(f"{source}: no examples")
        return Examples(rows, source)

    def load_test(self, data_dir: Optional[str]) -> Examples:
        """The unlabelled test split the leaderboard scores: test.jsonl (the diagnostics: their file), or the
        hub's test split; DataMissing if absent."""
        if data_dir is None:
            return self.read_hub("test", training=False, labelled=False)
        path = Path(data_dir) / self.test_file
        if not path.is_file():
            raise DataMissing(f"{path} not found")
        return self.read_file(path, 0.0, training=False, labelled=False)

    def test_files(self, cfg) -> dict[str, Path]:
        return {f"{self.submission}.jsonl": Path(cfg.data_dir) / self.test_file}

    @staticmethod
    def wanted_by(cfg) -> bool:
        """Whether a run of `cfg` has SuperGLUE tasks of its own (not only GLUE's RTE)."""
        return any(name in SUPERGLUE_TASK_NAMES and name != "rte" for name in cfg.tasks)

    def write_submission(self, model, tokenizer, cfg, device, precision, folder: Path) -> dict:
        """<folder>/<submission>.jsonl: one object a line, as the SuperGLUE leaderboard takes it."""
        try:
            test = self.load_test(cfg.data_dir)
        except DataMissing as reason:
            log.warning("%s: no test split for the submission (%s)", self.name, reason)
            return {self.name: f"missing: {reason}"}
        encoded = self.encode(test, tokenizer, cfg.max_length)
        outputs = predict(model, encoded, self.name, cfg.eval_batch_size, device, precision, tokenizer.pad_token_id)
        path = folder / f"{self.submission}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        records = self.submission_records(test, outputs)
        path.write_text("".join(json.dumps(record) + "\n" for record in records))
        log.info("%s: %d test predictions in %s", self.name, len(records), path)
        return {self.name: str(path)}


class PairTask(SuperGlueTask, TextClassification):
    """A SuperGLUE task that is a text pair (or a few fields) to one of `labels`."""

    fields: tuple[str, ...]  # of a file's object and of the hub's columns, in the original's order
    labels: tuple  # the files' label values, in the order of the hub's label ids
    submission_labels: tuple  # what the leaderboard takes for each label id
    train_fields: Optional[tuple[str, ...]] = None  # the training data's, where it is another task's (RTE)
    own_file: Optional[str] = None  # the diagnostics' one file (validation and test alike)

    @property
    def eval_splits(self) -> tuple[EvalSplit, ...]:
        if self.own_file is None:
            return super().eval_splits
        return (EvalSplit(self.name, self.own_file, "test"),)  # the hub keeps a diagnostic as its test split

    @property
    def test_file(self) -> str:
        return self.own_file or super().test_file

    def _fields(self, training: bool) -> tuple[str, ...]:
        return self.train_fields if training and self.train_fields else self.fields

    def rows(self, record: dict, training: bool, labelled: bool) -> list[Row]:
        if self.hub_config == "wsc.fixed":
            record = fix_wsc_spans({**record, **record["target"]})
        texts = tuple(str(record[name]) for name in self._fields(training))
        label = label_of(record["label"], self.labels) if labelled else 0
        return [Row(texts, label, record["idx"])]

    def hub_rows(self, dataset, training: bool, labelled: bool, source: str) -> list[Row]:
        columns = [dataset[name] for name in self._fields(training)]
        labels = dataset["label"] if labelled else [0] * len(dataset)
        return [Row(tuple(str(value) for value in texts), hub_label(label, len(self.labels), source, row), idx)
                for row, (texts, label, idx) in enumerate(zip(zip(*columns), labels, dataset["idx"]))]

    def read_file(self, path: Path, max_malformed_fraction: float, training: bool, labelled: bool = True) -> Examples:
        return self._checked(super().read_file(path, max_malformed_fraction, training, labelled), training)

    def read_hub(self, split: str, training: bool, labelled: bool = True) -> Examples:
        return self._checked(super().read_hub(split, training, labelled), training)

    def _checked(self, examples: Examples, training: bool) -> Examples:
        if self.metric == "gender_parity" and not training:
            _check_pairs(examples)
        return examples

    def encode(self, split: Examples, tokenizer, max_length: int) -> EncodedSplit:
        firsts = [joined(row.texts[:-1], tokenizer) for row in split.rows]
        encoded = tokenizer(firsts, [row.texts[-1] for row in split.rows], truncation=True, max_length=max_length)
        pairs = [position // 2 for position in range(len(split))] if self.metric == "gender_parity" else None
        return EncodedSplit(encoded["input_ids"], torch.tensor(split.labels, dtype=torch.int64), split.source,
                            token_types_of(encoded, tokenizer), pairs)

    def score(self, outputs: np.ndarray, labels: np.ndarray, scoring: Optional[list] = None) -> dict[str, float]:
        if self.metric != "gender_parity":
            return metrics.score(self.metric, outputs, labels)
        predicted = outputs.argmax(axis=-1)
        return {"gender_parity": metrics.gender_parity(predicted, scoring),
                **metrics.classification_scores("accuracy", predicted, labels)}

    def submission_records(self, test: Examples, outputs: torch.Tensor) -> list[dict]:
        predicted = outputs.argmax(dim=-1).tolist()
        return [{"idx": row.idx, "label": self.submission_labels[label]} for row, label in zip(test.rows, predicted)]


def _check_pairs(examples: Examples) -> None:
    """AX-g's examples come in pairs, rows 2k and 2k+1, that differ only in the gender of a pronoun in the
    premise: the same hypothesis. Gender parity compares each pair's predictions."""
    rows = examples.rows
    if len(rows) % 2:
        raise CrammingError(f"{examples.source}: {len(rows)} examples, not pairs (AX-g's come in pairs)")
    for first in range(0, len(rows), 2):
        if rows[first].texts[-1] != rows[first + 1].texts[-1]:
            raise CrammingError(f"{examples.source}: examples {first + 1} and {first + 2} (idx {rows[first].idx}, "
                                f"{rows[first + 1].idx}) are not a pair: their hypotheses differ")


def fix_wsc_spans(example: dict) -> dict:
    """WSC's `wsc.fixed` form (the hub's, which the original reads): a span text that is not a substring of the
    text gets the case of the text's word at its index, loses a final period and a line break (a few, which
    have words between their parts, stay as they are; "theyscold" gets the index 10, as the hub's fix gives it)."""
    example = dict(example)
    for span in ("span1", "span2"):
        text, index = example[f"{span}_text"], example[f"{span}_index"]
        if not isinstance(text, str) or not isinstance(index, int):
            raise Malformed(f"{span}_text {text!r} and {span}_index {index!r} must be a string and an integer")
        if text in example["text"] or text in ("Kamenev and Zinoviev", "Kamenev, Zinoviev, and Stalin"):
            continue
        if "theyscold" in text:
            example["span2_index"] = 10
        words = example["text"].split()
        if not 0 <= index < len(words) or not text:
            raise Malformed(f"{span}_index {index} is not a word of the text ({len(words)} words)")
        text = (text[0].lower() if words[index][0].islower() else text[0].upper()) + text[1:]
        example[f"{span}_text"] = text.rstrip(".").replace("\n", " ")
    return example


ENTAILMENT = ("entailment", "not_entailment")
RTE_FIELDS = ("premise", "hypothesis")
TRUE_OR_FALSE = (False, True)


class BoolQ(PairTask):
    name, folder, hub_config, submission, metric = "boolq", "BoolQ", "boolq", "BoolQ", "accuracy"
    fields, labels, submission_labels = ("question", "passage"), TRUE_OR_FALSE, ("false", "true")


class Cb(PairTask):
    name, folder, hub_config, submission, metric = "cb", "CB", "cb", "CB", "macro_f1"
    fields = RTE_FIELDS
    labels = submission_labels = ("entailment", "contradiction", "neutral")


class Wic(PairTask):
    name, folder, hub_config, submission, metric = "wic", "WiC", "wic", "WiC", "accuracy"
    fields, labels, submission_labels = ("word", "sentence1", "sentence2"), TRUE_OR_FALSE, ("false", "true")


class Wsc(PairTask):
    name, folder, hub_config, submission, metric = "wsc", "WSC", "wsc.fixed", "WSC", "accuracy"
    fields = ("text", "span1_index", "span2_index", "span1_text", "span2_text")
    labels, submission_labels = TRUE_OR_FALSE, ("False", "True")


class Diagnostic(PairTask):
    """AX-b and AX-g: one file, scored by a model fine-tuned on RTE's training split; outside the score."""

    labels = submission_labels = ENTAILMENT
    train_folder, train_hub_config, train_fields = "RTE", "rte", RTE_FIELDS
    in_superglue_score = False


class AxB(Diagnostic):
    name, folder, hub_config, submission, metric = "axb", "AX-b", "axb", "AX-b", "matthews"
    fields, own_file = ("sentence1", "sentence2"), "AX-b/AX-b.jsonl"


class AxG(Diagnostic):
    name, folder, hub_config, submission, metric = "axg", "AX-g", "axg", "AX-g", "gender_parity"
    fields, own_file = RTE_FIELDS, "AX-g/AX-g.jsonl"


PAIR_TASKS: tuple[type[PairTask], ...] = (BoolQ, Cb, Wic, Wsc, AxB, AxG)


class SuperGlueRte(PairTask):
    """SuperGLUE's RTE is GLUE's `rte` task; this is only its leaderboard file, RTE.jsonl, which GLUE's rte writes
    from SuperGLUE's RTE/test.jsonl (or the hub's) in a run that has SuperGLUE tasks too."""

    name, folder, hub_config, submission, metric = "superglue-rte", "RTE", "rte", "RTE", "accuracy"
    fields, labels, submission_labels = RTE_FIELDS, ENTAILMENT, ENTAILMENT


# The SuperGLUE score: the mean over its eight tasks of each task's score, the mean of its official metrics
# (CB: macro-F1 and accuracy; MultiRC: F1a and exact match; ReCoRD: token F1 and exact match). RTE is GLUE's
# task. AX-b (Matthews correlation) and AX-g (gender parity, accuracy) are diagnostics, reported beside it.
SCORE_METRICS: dict[str, tuple[str, ...]] = {
    "boolq": ("accuracy",), "cb": ("macro_f1", "accuracy"), "copa": ("accuracy",),
    "multirc": ("f1a", "exact_match"), "record": ("f1", "exact_match"), "rte": ("accuracy",),
    "wic": ("accuracy",), "wsc": ("accuracy",),
}
DIAGNOSTIC_METRICS: dict[str, tuple[str, ...]] = {"axb": ("matthews",), "axg": ("gender_parity", "accuracy")}
COLUMNS = {"boolq": "BoolQ", "cb": "CB", "copa": "COPA", "multirc": "MultiRC", "record": "ReCoRD", "rte": "RTE",
           "wic": "WiC", "wsc": "WSC", "axb": "AX-b", "axg": "AX-g"}
SUPERGLUE_TASK_NAMES = tuple(COLUMNS)  # eval=superglue runs these


def superglue_score(scores: dict[str, dict[str, float]]) -> tuple[Optional[float], list[str]]:
    """The mean of the task scores present in `scores` (by split), and the tasks it averaged; None when no
    SuperGLUE task but RTE (which GLUE has too) ran."""
    present = [name for name in SCORE_METRICS if name in scores]
    if not [name for name in present if name != "rte"]:  # GLUE's RTE alone is no SuperGLUE run
        return None, []
    task_scores = [sum(scores[name][metric] for metric in SCORE_METRICS[name]) / len(SCORE_METRICS[name])
                   for name in present]
    return sum(task_scores) / len(task_scores), present
