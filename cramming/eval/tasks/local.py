"""Your own data as a task (`eval.tasks=[local]`, settings `eval.local.*`): a folder holding `train` and `dev`
files, each a `.tsv` (read as GLUE's: tabs only, quotes plain characters) or a `.csv` (quoted fields), with a
header row naming the text column(s) and the label column. Fine-tuned and scored under the protocol like a
GLUE task, reported beside the GLUE score under the name `local`.

A classification lists its label strings (`eval.local.labels`, in the order of their ids); with none the label
is a score (regression, `eval.local.metric=pearson`). A row whose label is not one of them, a missing column
or an empty file ends in one line naming the file (tables.py's rule for malformed rows).
"""

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from cramming.errors import CrammingError
from cramming.eval.tasks.base import EvalSplit, TaskData
from cramming.eval.tasks.classification import TextClassification
from cramming.plugins import Setting

CLASSIFICATION_METRICS = ("accuracy", "f1", "matthews")
SCORE_METRICS = ("pearson",)


@dataclass
class LocalTaskConfig:
    """`eval.local`: where your data is and how to read it (docs/glue.md). Set only with local in eval.tasks."""

    folder: Optional[str] = None  # holds train.tsv or train.csv and dev.tsv or dev.csv, each with a header row
    text_columns: list[str] = field(default_factory=lambda: ["text"])  # one column, or two for text pairs
    label_column: str = "label"
    labels: Optional[list[str]] = None  # the label strings in the order of their ids; null: a score (regression)
    metric: Optional[str] = None  # accuracy (null's choice) | f1 (of the second label) | matthews; a score: pearson


class LocalTask(TextClassification):
    name = "local"
    eval_splits = (EvalSplit("local", "dev", "validation"),)
    settings = (Setting("eval.local", LocalTaskConfig),)

    def __init__(self, local: LocalTaskConfig):
        """`local`: eval.local, checked (by check())."""
        self.folder = Path(local.folder)
        self.text_columns = (local.text_columns[0], (local.text_columns[1:] or [None])[0])
        self.label_column = local.label_column
        self.labels = None if local.labels is None else tuple(local.labels)
        self.metric = local.metric or "accuracy"

    @classmethod
    def check(cls, cfg) -> None:
        local = cfg.local
        if cls.name in cfg.tasks:
            _check(local)
            return
        default = LocalTaskConfig()
        for key in (item.name for item in dataclasses.fields(local)):
            if getattr(local, key) != getattr(default, key):
                raise CrammingError(f"eval.local.{key}={getattr(local, key)} is set but eval.tasks has no "
                                    f"{cls.name}, so nothing would read it: add {cls.name} to eval.tasks or drop it")

    @classmethod
    def build(cls, cfg) -> "LocalTask":
        return cls(cfg.local)

    def load(self, data_dir: Optional[str], max_malformed_fraction: float) -> TaskData:
        """The train and dev files of eval.local.folder (eval.data_dir is the other tasks' place)."""
        train, dev = (self.read_file(self._file(stem), max_malformed_fraction) for stem in ("train", "dev"))
        return TaskData(self, train, {self.eval_splits[0].name: dev}, {})

    def _file(self, stem: str) -> Path:
        found = [path for path in (self.folder / f"{stem}.tsv", self.folder / f"{stem}.csv") if path.is_file()]
        if len(found) != 1:
            there = "both" if found else "neither of"
            raise CrammingError(f"eval.local.folder={self.folder} holds {there} {stem}.tsv and {stem}.csv; it needs "
                                "one of them")
        return found[0]


def _check(settings: LocalTaskConfig) -> None:
    """Every eval.local value, before any data is read."""
    if settings.folder is None:
        raise CrammingError("eval.tasks has local but eval.local.folder is null: name the folder that holds your "
                            "train and dev files")
    if not Path(settings.folder).is_dir():
        raise CrammingError(f"eval.local.folder={settings.folder}: no such folder")
    columns = settings.text_columns
    if not 1 <= len(columns) <= 2 or not all(columns) or len(set(columns)) != len(columns):
        raise CrammingError(f"eval.local.text_columns={list(columns)} must name one column, or two for text pairs")
    if not settings.label_column or settings.label_column in columns:
        raise CrammingError(f"eval.local.label_column={settings.label_column!r} must name a column that holds no text")
    labels, metric = settings.labels, settings.metric
    if metric is not None and metric not in (*CLASSIFICATION_METRICS, *SCORE_METRICS):
        raise CrammingError(f"eval.local.metric={metric} is not one of "
                            f"{', '.join((*CLASSIFICATION_METRICS, *SCORE_METRICS))} (or null: accuracy)")
    if labels is None and metric is None:
        raise CrammingError("eval.local.labels is null: list the label strings in the order of their ids (e.g. "
                            "eval.local.labels=[negative,positive]), or set eval.local.metric=pearson when the "
                            "label is a score")
    if (labels is None) != (metric in SCORE_METRICS):
        raise CrammingError(f"eval.local.metric={metric} scores {'classes' if labels is None else 'a number'} but "
                            f"eval.local.labels={labels} makes the label "
                            f"{'a number' if labels is None else 'a class'}: "
                            "a score takes labels=null and metric=pearson, classes their list")
    if labels is None:
        return
    if len(labels) < 2 or not all(labels) or len(set(labels)) != len(labels):
        raise CrammingError(f"eval.local.labels={list(labels)} must list two or more different label strings")
    if metric == "f1" and len(labels) != 2:
        raise CrammingError(f"eval.local.metric=f1 scores the second of two labels; eval.local.labels has "
                            f"{len(labels)}")
