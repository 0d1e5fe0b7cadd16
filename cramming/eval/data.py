"""GLUE tasks: what each one reads, and readers for the hub (`nyu-mll/glue`) and the classic TSV layout.

Both sources give the same labels: the integer ids of the hub dataset (a float score for STS-B).
The TSV reader splits on tabs only — never on quotes, which MNLI and QNLI contain unbalanced —
and on "\\n" only, so every file yields exactly its official number of rows.
"""

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Union

from cramming.errors import CrammingError

log = logging.getLogger(__name__)

HUB_PATH = "nyu-mll/glue"
SCORE_RANGE = (0.0, 5.0)  # STS-B: the mean of annotators' 0-5 similarity ratings


@dataclass(frozen=True)
class EvalSplit:
    """One scored evaluation set of a task (MNLI has two: matched and mismatched; SWAG's is its validation)."""

    name: str  # the name its scores are reported under
    file: str  # in the task's folder of the data directory
    hub_split: str


@dataclass(frozen=True)
class GlueTask:
    name: str  # as in `eval.tasks` and the hub config name
    folder: str  # directory of the classic GLUE layout
    eval_splits: tuple[EvalSplit, ...]
    hub_text_columns: tuple[str, Optional[str]]  # (first segment, second segment or None)
    tsv_text_columns: tuple[str, Optional[str]]
    tsv_label_column: str
    # TSV label strings in the order of the hub's label ids; None for the STS-B regression score.
    tsv_labels: Optional[tuple[str, ...]]
    # Column names of a TSV without a header row (CoLA); None when the file starts with its header.
    implied_header: Optional[tuple[str, ...]] = None

    @property
    def num_labels(self) -> int:
        """Outputs of the classification head; 1 means regression."""
        return len(self.tsv_labels) if self.tsv_labels is not None else 1


def _dev(name: str) -> tuple[EvalSplit, ...]:
    return (EvalSplit(name, "dev.tsv", "validation"),)


TASKS: dict[str, GlueTask] = {
    task.name: task
    for task in [
        GlueTask(
            "cola", "CoLA", _dev("cola"), ("sentence", None), ("sentence", None), "label", ("0", "1"),
            implied_header=("source", "label", "original_label", "sentence"),
        ),
        GlueTask("sst2", "SST-2", _dev("sst2"), ("sentence", None), ("sentence", None), "label", ("0", "1")),
        GlueTask(
            "mrpc", "MRPC", _dev("mrpc"), ("sentence1", "sentence2"), ("#1 String", "#2 String"), "Quality",
            ("0", "1"),
        ),
        GlueTask(
            "stsb", "STS-B", _dev("stsb"), ("sentence1", "sentence2"), ("sentence1", "sentence2"), "score",
            None,
        ),
        GlueTask(
            "qqp", "QQP", _dev("qqp"), ("question1", "question2"), ("question1", "question2"), "is_duplicate",
            ("0", "1"),
        ),
        GlueTask(
            "mnli",
            "MNLI",
            (
                EvalSplit("mnli-m", "dev_matched.tsv", "validation_matched"),
                EvalSplit("mnli-mm", "dev_mismatched.tsv", "validation_mismatched"),
            ),
            ("premise", "hypothesis"),
            ("sentence1", "sentence2"),
            "gold_label",
            ("entailment", "neutral", "contradiction"),
        ),
        GlueTask(
            "qnli", "QNLI", _dev("qnli"), ("question", "sentence"), ("question", "sentence"), "label",
            ("entailment", "not_entailment"),
        ),
        GlueTask(
            "rte", "RTE", _dev("rte"), ("sentence1", "sentence2"), ("sentence1", "sentence2"), "label",
            ("entailment", "not_entailment"),
        ),
        GlueTask(
            "wnli", "WNLI", _dev("wnli"), ("sentence1", "sentence2"), ("sentence1", "sentence2"), "label",
            ("0", "1"),
        ),
    ]
}


def get_task(name: str) -> GlueTask:
    if name not in TASKS:
        raise CrammingError(f"unknown GLUE task '{name}'; known tasks: {', '.join(TASKS)}")
    return TASKS[name]


@dataclass
class GlueSplit:
    """The examples of one split, column-wise."""

    text_a: list[str]
    text_b: Optional[list[str]]
    labels: list[Union[int, float]]
    source: str  # file path or hub split, for messages
    skipped_rows: list[int] = field(default_factory=list)  # 1-based line numbers of tolerated malformed rows

    def __len__(self) -> int:
        return len(self.labels)


@dataclass
class GlueTaskData:
    task: GlueTask
    train: GlueSplit
    evaluations: dict[str, GlueSplit]  # by EvalSplit.name
    missing_evaluations: dict[str, str]  # EvalSplit.name -> why it is missing


class GlueDataMissing(Exception):
    """A task's files are absent or the hub is out of reach: the task is reported as missing, the rest run."""


def lines(path: Path):
    """Yield (line number, line without its line ending); splits on "\\n" only, drops a UTF-8 BOM."""
    with open(path, encoding="utf-8-sig", newline="\n") as file:
        for number, line in enumerate(file, start=1):
            yield number, line.removesuffix("\n").removesuffix("\r")


def read_tsv_split(path: Path, task: GlueTask, max_malformed_fraction: float) -> GlueSplit:
    """Read one classic GLUE TSV file.

    A row with the wrong number of fields or an unreadable label is malformed. Up to
    floor(max_malformed_fraction * rows) of them are skipped and counted (the reports list them);
    more than that is an error naming the file and the first bad line.
    """
    text_a, text_b, labels, malformed = [], [], [], []
    first_problem = ""
    header = task.implied_header
    try:
        for number, line in lines(path):
            fields = line.split("\t")
            if header is None:
                header = tuple(fields)
                _check_header(path, header, task)
                continue
            problem = _row_problem(fields, header, task)
            if problem:
                malformed.append(number)
                first_problem = first_problem or f"{path}, line {number}: {problem}"
                continue
            first, second = task.tsv_text_columns
            text_a.append(fields[header.index(first)])
            if second is not None:
                text_b.append(fields[header.index(second)])
            labels.append(_parse_label(fields[header.index(task.tsv_label_column)], task))
    except UnicodeDecodeError as error:
        raise CrammingError(f"{path}: not valid UTF-8 ({error.reason} at byte {error.start})") from None

    check_malformed(path, len(labels), malformed, first_problem, max_malformed_fraction,
                    "(only a header, or an empty file)")
    return GlueSplit(text_a, text_b if task.tsv_text_columns[1] else None, labels, str(path), malformed)


def check_malformed(path: Path, kept: int, malformed: list, first_problem: str | None, max_fraction: float,
                    when_empty: str) -> None:
    """The rule for a task file's malformed rows: a few are skipped and said, more than
    eval.max_malformed_fraction of the rows stop the run at the first of them; no rows at all is an error."""
    rows = kept + len(malformed)
    if rows == 0:
        raise CrammingError(f"{path}: no examples {when_empty}")
    tolerated = int(max_fraction * rows)
    if len(malformed) > tolerated:
        raise CrammingError(f"{first_problem} ({len(malformed)} malformed of {rows} rows, at most {tolerated} "
                            f"tolerated by eval.max_malformed_fraction={max_fraction})")
    if malformed:
        log.warning("%s: skipped %d malformed rows (first: %s)", path, len(malformed), first_problem)


def _check_header(path: Path, header: tuple[str, ...], task: GlueTask) -> None:
    wanted = [name for name in (*task.tsv_text_columns, task.tsv_label_column) if name is not None]
    absent = [name for name in wanted if name not in header]
    if absent:
        raise CrammingError(f"{path}, line 1: the header lacks the column(s) {', '.join(absent)}")


def _row_problem(fields: list[str], header: tuple[str, ...], task: GlueTask) -> str:
    """Why a row cannot be used, or "" when it can."""
    if len(fields) != len(header):
        return f"expected {len(header)} tab-separated fields, found {len(fields)}"
    label = fields[header.index(task.tsv_label_column)]
    try:
        _parse_label(label, task)
    except ValueError:
        low, high = SCORE_RANGE
        expected = f"a score between {low:g} and {high:g}" if task.tsv_labels is None else " or ".join(task.tsv_labels)
        return f"label {label!r} is not {expected}"
    return ""


def _parse_label(text: str, task: GlueTask) -> Union[int, float]:
    if task.tsv_labels is None:
        score = float(text)
        if not SCORE_RANGE[0] <= score <= SCORE_RANGE[1]:  # also "nan", which parses as a float
            raise ValueError(text)
        return score
    if text not in task.tsv_labels:
        raise ValueError(text)
    return task.tsv_labels.index(text)


def load_hub_split(task: GlueTask, split: str, labelled: bool = True) -> GlueSplit:
    """One split of `nyu-mll/glue` through `datasets.load_dataset` (downloaded once, then cached); test
    splits (`labelled=False`) carry -1 labels, replaced by placeholders."""
    import datasets

    try:
        dataset = datasets.load_dataset(HUB_PATH, task.name, split=split)
    except Exception as error:  # offline, unknown split, hub errors: all mean "not available here"
        first_line = (str(error).strip().splitlines() or [""])[0]
        raise GlueDataMissing(f"{HUB_PATH}/{task.name} split {split}: {type(error).__name__}: {first_line}")
    first, second = task.hub_text_columns
    source = f"{HUB_PATH}/{task.name}:{split}"
    labels = list(dataset["label"]) if labelled else [0] * len(dataset)
    if not labels:
        raise CrammingError(f"{source}: no examples")
    bad = next((row for row, label in enumerate(labels) if not _valid_label(label, task)), None)
    if bad is not None:
        raise CrammingError(f"{source}, row {bad}: label {labels[bad]!r} is out of range for {task.name}")
    return GlueSplit(text_a=list(dataset[first]), text_b=list(dataset[second]) if second else None, labels=labels,
                     source=source)


def _valid_label(label: Union[int, float], task: GlueTask) -> bool:
    if task.tsv_labels is None:
        return SCORE_RANGE[0] <= label <= SCORE_RANGE[1]
    return label in range(len(task.tsv_labels))


def load_task(task: GlueTask, data_dir: Optional[str], max_malformed_fraction: float) -> GlueTaskData:
    """Train split and every available evaluation split of a task, from `data_dir` (TSV) or the hub.

    Raises GlueDataMissing when the training data or every evaluation split is absent.
    """
    return load_splits(task, data_dir, "train.tsv",
                       lambda path: read_tsv_split(path, task, max_malformed_fraction),
                       lambda hub_split: load_hub_split(task, hub_split))


def load_splits(task, data_dir: Optional[str], train_file: str, read_file: Callable[[Path], Any],
                read_hub: Callable[[str], Any]) -> GlueTaskData:
    """A task's train split and every available one of its eval_splits: from the files in
    `<data_dir>/<task.folder>/` (read_file), or from the hub without a data_dir (read_hub). GLUE's tasks and
    SWAG load this way. Raises GlueDataMissing when the training data or every evaluation split is absent."""

    def read(file: str, hub_split: str):
        if data_dir is None:
            return read_hub(hub_split)
        path = Path(data_dir) / task.folder / file
        if not path.is_file():
            raise GlueDataMissing(f"{path} not found")
        return read_file(path)

    train = read(train_file, "train")
    evaluations, missing = {}, {}
    for split in task.eval_splits:
        try:
            evaluations[split.name] = read(split.file, split.hub_split)
        except GlueDataMissing as reason:
            missing[split.name] = str(reason)
    if not evaluations:
        raise GlueDataMissing("; ".join(missing.values()))
    return GlueTaskData(task, train, evaluations, missing)
