"""GLUE's nine tasks: what each one reads (the hub's `nyu-mll/glue`, or the classic TSV layout), its metric,
its GLUE-server file; the nine protocol numbers whose mean is the GLUE score, and the published table.

Both sources give the same labels: the integer ids of the hub dataset (a float score for STS-B). The TSV
files are read as tables.py reads `.tsv`: tabs only, no quote handling, official row counts.
"""

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import torch

from cramming.errors import CrammingError
from cramming.eval.submission import TestSplit, write_test_predictions
from cramming.eval.tasks.base import DataMissing, EvalSplit, Task, TaskData, load_hub, load_splits
from cramming.eval.tasks.classification import TextClassification, TextSplit
from cramming.eval.tasks.superglue import SuperGlueRte
from cramming.eval.tasks.tables import read_unlabelled

HUB_PATH = "nyu-mll/glue"
TEST_ID_COLUMNS = ("index", "id", "idx")


@dataclass(frozen=True)
class GlueSplit(EvalSplit):
    """An evaluation split, and its test counterpart that the GLUE server scores."""

    submission: str = ""  # the server's file name, <submission>.tsv
    test_file: str = "test.tsv"
    test_hub_split: str = "test"


class GlueTask(TextClassification):
    """One of GLUE's nine: a subclass names, besides a text classification's attributes, its `folder` of the classic
    layout and its `hub_text_columns`; its `name` is also the hub config's."""

    leaderboard = "GLUE"

    folder: str  # directory of the classic GLUE layout
    eval_splits: tuple[GlueSplit, ...]
    hub_text_columns: tuple[str, Optional[str]]  # (first segment, second segment or None)
    # TSV label strings in the order of the hub's label ids; None for the STS-B regression score.
    labels: Optional[tuple[str, ...]]
    score_range = (0.0, 5.0)  # STS-B: the mean of annotators' 0-5 similarity ratings
    in_glue = True
    # the same task's file for another leaderboard, written when a run has that benchmark's tasks too (RTE's
    # RTE.jsonl for SuperGLUE: tasks/superglue.py)
    also_submits: Optional[type[Task]] = None

    def load(self, data_dir: Optional[str], max_malformed_fraction: float) -> TaskData:
        return load_splits(self, self.folder, data_dir, "train.tsv",
                           lambda path: self.read_file(path, max_malformed_fraction), self.load_hub_split)

    def load_hub_split(self, split: str, labelled: bool = True) -> TextSplit:
        """One split of `nyu-mll/glue` through `datasets.load_dataset` (downloaded once, then cached); test
        splits (`labelled=False`) carry -1 labels, replaced by placeholders."""
        dataset = load_hub(HUB_PATH, self.name, split)
        first, second = self.hub_text_columns
        source = f"{HUB_PATH}/{self.name}:{split}"
        labels = list(dataset["label"]) if labelled else [0] * len(dataset)
        if not labels:
            raise CrammingError(f"{source}: no examples")
        bad = next((row for row, label in enumerate(labels) if not self._valid_label(label)), None)
        if bad is not None:
            raise CrammingError(f"{source}, row {bad}: label {labels[bad]!r} is out of range for {self.name}")
        return TextSplit(text_a=list(dataset[first]), text_b=list(dataset[second]) if second else None,
                         labels=labels, source=source)

    def _valid_label(self, label) -> bool:
        if self.labels is None:
            return self.score_range[0] <= label <= self.score_range[1]
        return label in range(len(self.labels))

    def load_test(self, split: GlueSplit, data_dir: Optional[str]) -> TestSplit:
        """The test counterpart of an evaluation split: its test file, whose header names an id column and the
        text columns, or the hub's test split. DataMissing if absent."""
        if data_dir is None:
            dataset = self.load_hub_split(split.test_hub_split, labelled=False)
            return TestSplit([str(i) for i in range(len(dataset))], dataset)
        path = Path(data_dir) / self.folder / split.test_file
        if not path.is_file():
            raise DataMissing(f"{path} not found")
        first, second = self.text_columns
        ids, rows = read_unlabelled(path, TEST_ID_COLUMNS, [name for name in (first, second) if name])
        text_b = [row[second] for row in rows] if second else None
        return TestSplit(ids, TextSplit([row[first] for row in rows], text_b, [0] * len(ids), str(path)))

    def label_strings(self, outputs: torch.Tensor) -> list[str]:
        """The server's labels: the TSV label strings (entailment, ..., or 0/1), STS-B scores within [0, 5]."""
        if self.labels is None:
            return [f"{score:.3f}" for score in outputs[:, 0].clamp(*self.score_range).tolist()]
        return [self.labels[label] for label in outputs.argmax(dim=-1).tolist()]

    def test_files(self, cfg) -> dict[str, Path]:
        folder = Path(cfg.data_dir) / self.folder
        own = {f"{split.submission}.tsv": folder / split.test_file for split in self.eval_splits}
        also = self.also_submits is not None and self.also_submits.wanted_by(cfg)
        return own | (self.also_submits().test_files(cfg) if also else {})

    def write_submission(self, model, tokenizer, cfg, device, precision, folder: Path) -> dict:
        written = write_test_predictions(self, model, tokenizer, cfg, device, precision, folder)
        if self.also_submits is not None and self.also_submits.wanted_by(cfg):
            written |= self.also_submits().write_submission(model, tokenizer, cfg, device, precision, folder)
        return written


def _dev(name: str, submission: str) -> tuple[GlueSplit, ...]:
    return (GlueSplit(name, "dev.tsv", "validation", submission),)


PAIR = ("sentence1", "sentence2")
ENTAILMENT = ("entailment", "not_entailment")


class Cola(GlueTask):
    name, folder, metric, eval_splits = "cola", "CoLA", "matthews", _dev("cola", "CoLA")
    hub_text_columns = text_columns = ("sentence", None)
    label_column, labels = "label", ("0", "1")
    implied_header = ("source", "label", "original_label", "sentence")


class Sst2(GlueTask):
    name, folder, metric, eval_splits = "sst2", "SST-2", "accuracy", _dev("sst2", "SST-2")
    hub_text_columns = text_columns = ("sentence", None)
    label_column, labels = "label", ("0", "1")


class Mrpc(GlueTask):
    name, folder, metric, eval_splits = "mrpc", "MRPC", "f1", _dev("mrpc", "MRPC")
    hub_text_columns, text_columns = PAIR, ("#1 String", "#2 String")
    label_column, labels = "Quality", ("0", "1")


class Stsb(GlueTask):
    name, folder, metric, eval_splits = "stsb", "STS-B", "pearson", _dev("stsb", "STS-B")
    hub_text_columns = text_columns = PAIR
    label_column, labels = "score", None


class Qqp(GlueTask):
    name, folder, metric, eval_splits = "qqp", "QQP", "f1", _dev("qqp", "QQP")
    hub_text_columns = text_columns = ("question1", "question2")
    label_column, labels = "is_duplicate", ("0", "1")


class Mnli(GlueTask):
    name, folder, metric = "mnli", "MNLI", "accuracy"
    eval_splits = (GlueSplit("mnli-m", "dev_matched.tsv", "validation_matched", "MNLI-m", "test_matched.tsv",
                             "test_matched"),
                   GlueSplit("mnli-mm", "dev_mismatched.tsv", "validation_mismatched", "MNLI-mm",
                             "test_mismatched.tsv", "test_mismatched"))
    hub_text_columns, text_columns = ("premise", "hypothesis"), PAIR
    label_column, labels = "gold_label", ("entailment", "neutral", "contradiction")


class Qnli(GlueTask):
    name, folder, metric, eval_splits = "qnli", "QNLI", "accuracy", _dev("qnli", "QNLI")
    hub_text_columns = text_columns = ("question", "sentence")
    label_column, labels = "label", ENTAILMENT


class Rte(GlueTask):
    name, folder, metric, eval_splits = "rte", "RTE", "accuracy", _dev("rte", "RTE")
    hub_text_columns = text_columns = PAIR
    label_column, labels = "label", ENTAILMENT
    also_submits = SuperGlueRte


class Wnli(GlueTask):
    name, folder, metric, eval_splits = "wnli", "WNLI", "accuracy", _dev("wnli", "WNLI")
    hub_text_columns = text_columns = PAIR
    label_column, labels = "label", ("0", "1")


GLUE_TASKS: tuple[type[GlueTask], ...] = (Cola, Sst2, Mrpc, Stsb, Qqp, Mnli, Qnli, Rte, Wnli)

# The nine numbers whose mean is the GLUE score: (evaluation split, metric), in table order (WNLI is not one).
_BY_NAME = {task.name: task for task in GLUE_TASKS}
PROTOCOL_NUMBERS: tuple[tuple[str, str], ...] = tuple(
    (split.name, _BY_NAME[name].metric)
    for name in ("mnli", "sst2", "stsb", "rte", "qnli", "qqp", "mrpc", "cola") for split in _BY_NAME[name].eval_splits
)
# The report's table: the nine numbers in these columns (MNLI's matched and mismatched share the first), and
# the published GLUE dev scores under the same protocol (docs/reproduce.md; Geiping & Goldstein, 2022), nine
# numbers and the average.
COLUMNS = ("MNLI (m/mm)", "SST-2", "STSB", "RTE", "QNLI", "QQP", "MRPC", "CoLA", "Average")
METRICS_NOTE = "Metrics: CoLA Matthews correlation; STSB Pearson; MRPC and QQP F1; the rest accuracy."
REFERENCE_ROWS: dict[str, tuple[float, ...]] = {
    "BERT-base, fully trained": (83.2, 83.4, 91.9, 86.7, 59.2, 90.6, 87.7, 89.3, 56.5, 80.9),
    "BERT-base, no pretraining": (34.1, 34.1, 79.9, 17.8, 47.3, 50.0, 68.6, 77.9, 0.0, 45.5),
    "crammed BERT, 1 day A6000 (2022)": (83.9, 84.1, 92.2, 84.6, 53.8, 89.5, 87.3, 87.5, 44.5, 78.6),
    "crammed BERT, 1 day A6000 (2023 code)": (84.1, 84.6, 92.0, 87.4, 58.5, 90.2, 87.5, 88.9, 53.3, 80.7),
    "BERT from scratch, 4 days RTX 3060 Ti": (79.3, 80.1, 89.1, 61.9, 55.9, 86.3, 86.4, 74.8, 41.0, 72.7),
}


def classic_glue_dir(folder: Optional[Path], *needed: str) -> Path:
    """The `--glue-dir` of a benchmark or the golden check: these read local TSVs only (no hub fallback), so a
    folder not given, or one without the files named, is one line."""
    if folder is None:
        raise CrammingError("--glue-dir <folder> is needed: a folder of the classic GLUE TSVs (RTE/train.tsv, ...)")
    missing = [folder / path for path in needed if not (folder / path).is_file()]
    if missing:
        raise CrammingError(f"--glue-dir {folder}: {missing[0]} not found (a classic GLUE TSV directory)")
    return folder


def glue_average(scores: dict[str, dict[str, float]]) -> tuple[Optional[float], list[str]]:
    """Mean of the protocol numbers present in `scores` (by split), and the splits it averaged."""
    present = [(split, metric) for split, metric in PROTOCOL_NUMBERS if split in scores]
    if not present:
        return None, []
    return sum(scores[split][metric] for split, metric in present) / len(present), [s for s, _ in present]
