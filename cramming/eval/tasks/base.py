"""What a downstream task is: one object that loads its splits, encodes them, puts its head on the encoder,
scores its outputs, keeps what it trained and, where a server scores its test split, writes the submission.

GLUE's nine tasks (glue.py), SuperGLUE's (superglue.py and the files it names), SWAG and RACE (swag.py,
race.py) are Tasks; registry.py names them for `eval.tasks`, and eval/run.py runs every one the same way.
"""

import dataclasses
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional

import numpy as np
from torch import nn

from cramming import hub
from cramming.eval import metrics
from cramming.plugins import Plugin, Setting

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from cramming.eval.batching import EncodedSplit
    from cramming.eval.config import GlueBaseConfig
    from cramming.eval.encoders import PretrainedEncoder
    from cramming.eval.parameter_efficient import LoraSettings


@dataclass(frozen=True)
class EvalSplit:
    """One scored evaluation set of a task (MNLI has two: matched and mismatched)."""

    name: str  # the name its scores are reported under
    file: str  # in the task's folder of the data directory
    hub_split: str


@dataclass
class TaskData:
    task: "Task"
    train: Any  # the task's own split type: len() examples, `per_example` (take), `source`, `skipped_rows`
    evaluations: dict[str, Any]  # by EvalSplit.name
    missing_evaluations: dict[str, str]  # EvalSplit.name -> why it is missing


def take(split: Any, rows: list[int]) -> Any:
    """Examples `rows` of a split of any task (its fields named in `per_example`, one entry an example, indexed;
    the others kept): a subset taken before encoding, so a smoke run tokenizes what it trains on."""
    return dataclasses.replace(split, **{name: [getattr(split, name)[row] for row in rows]
                                         for name in split.per_example if getattr(split, name) is not None})


class DataMissing(Exception):
    """A task's files are absent or the hub is out of reach: the task is reported as missing, the rest run.
    `cause`: what several tasks' reasons share (the hub out of reach), said once for all of them."""

    def __init__(self, message: str, cause: str | None = None):
        super().__init__(message)
        self.cause = cause


def absent_text(absent: dict[str, str]) -> str:
    """{what: why} as 'a, b: why; c: why', a reason several share said once."""
    by_why: dict[str, list[str]] = {}
    for what, why in absent.items():
        by_why.setdefault(why, []).append(what)
    return "; ".join(f"{', '.join(whats)}: {why}" for why, whats in by_why.items())


class Task(Plugin, ABC):
    """A downstream task, a plug-in (cramming.plugins) whose section is `eval`. Subclasses set `name` (as in
    eval.tasks), `eval_splits`, `metric` (the main metric of
    every evaluation split: the one in the tables, the others are logged beside it) and `in_glue` (GLUE's own
    tasks; the others are reported beside the GLUE score, never in it)."""

    name: str
    eval_splits: tuple[EvalSplit, ...]
    metric: str
    in_glue = False
    # the server its test predictions are zipped for (eval.predict_test; submission.SERVERS); None: no leaderboard
    # takes them (RACE, SWAG, local tasks), and each task that has one names it (GlueTask, SuperGlueTask)
    leaderboard: str | None = None
    # Its own keys, at their paths under `eval` (eval.local): the registry adds them to the section's schema
    settings: tuple[Setting, ...] = ()

    @classmethod
    def check(cls, cfg: "GlueBaseConfig") -> None:
        """Its rules on the `eval` config, called for every task of the registry, requested or not: a task with
        settings of its own refuses a bad value, or one set while eval.tasks does not name it, before anything
        loads (CrammingError). Most tasks have none."""

    @classmethod
    def build(cls, cfg: "GlueBaseConfig") -> "Task":
        """The task as the checked `cfg` sets it up (a task with settings of its own reads them here)."""
        return cls()

    @abstractmethod
    def load(self, data_dir: Optional[str], max_malformed_fraction: float) -> TaskData:
        """The train split and every available evaluation split; DataMissing when the training data or every
        evaluation split is absent."""

    @abstractmethod
    def encode(self, split: Any, tokenizer: "PreTrainedTokenizerBase", max_length: int) -> "EncodedSplit":
        """Token ids (and segment ids where the tokenizer makes them) and labels, unpadded."""

    @abstractmethod
    def model(self, encoder: "PretrainedEncoder", dropout: float, seed: int,
              lora: "Optional[LoraSettings]" = None) -> nn.Module:
        """The encoder with this task's fresh head drawn from `seed`; its forward takes a collated batch and
        returns `.loss` and `.logits`."""

    def score(self, outputs: np.ndarray, labels: np.ndarray, scoring: Optional[list] = None) -> dict[str, float]:
        """Scores of an evaluation split, in percent, from the model's outputs (N, outputs); `scoring` is what the
        task's encode() put beside the labels (EncodedSplit.scoring), for tasks scored by group."""
        return metrics.score(self.metric, outputs, labels)

    @abstractmethod
    def save(self, model: nn.Module, encoder: "PretrainedEncoder", folder: Path) -> None:
        """What `model` (as `model()` built it, then fine-tuned) learned, as a transformers folder that the
        Auto class of this task's head loads (LoRA merged into the weights)."""

    @property
    @abstractmethod
    def head(self) -> str:
        """What the model `save` writes ends in, for messages: "a 2-label head"."""

    @abstractmethod
    def saved_model(self, folder: Path) -> Optional[nn.Module]:
        """The model `save` wrote to `folder` (or its int8 copy), loaded by transformers; None when the folder
        holds another kind of model or head."""

    def test_files(self, cfg: "GlueBaseConfig") -> dict[str, Path]:
        """{submission file: the test file under cfg.data_dir it is predicted from}: what eval.predict_test reads,
        checked before any fine-tuning; none for a task no server scores."""
        return {}

    def write_submission(self, model: nn.Module, tokenizer: "PreTrainedTokenizerBase", cfg: "GlueBaseConfig",
                         device, precision, folder: Path) -> Optional[dict]:
        """The test split predictions a server scores, written to `folder`: {split: file, or "missing: why"};
        None for a task no server scores."""
        return None


def load_hub(path: str, config: Optional[str], split: str):
    """One split of a hub dataset through `datasets.load_dataset` (downloaded once, then cached); DataMissing
    when it cannot be had (offline, an unknown split, hub errors)."""
    import datasets  # noqa: PLC0415 -- seconds to import: only when a task reads the hub

    offline = hub.offline()
    try:
        return datasets.load_dataset(path, config, split=split)
    except Exception as error:  # offline, unknown split, hub errors: all mean "not available here"
        first_line = (str(error).strip().splitlines() or [""])[0] + hub.out_of_reach(offline)
        raise DataMissing(f"{path}/{config} split {split}: {type(error).__name__}: {first_line}",
                          cause=f"{path} from the hub: {type(error).__name__}: {first_line}") from None


def load_splits(task: Task, folder: str, data_dir: Optional[str], train_file: str, read_file: Callable[[Path], Any],
                read_hub: Callable[[str], Any]) -> TaskData:
    """A task's train split and every available one of its eval_splits: from the files in
    `<data_dir>/<folder>/` (read_file), or from the hub without a data_dir (read_hub). Raises DataMissing when
    the training data or every evaluation split is absent."""

    def read(file: str, hub_split: str):
        if data_dir is None:
            return read_hub(hub_split)
        path = Path(data_dir) / folder / file
        if not path.is_file():
            raise DataMissing(f"{path} not found")
        return read_file(path)

    train = read(train_file, "train")
    evaluations, missing = {}, {}
    for split in task.eval_splits:
        try:
            evaluations[split.name] = read(split.file, split.hub_split)
        except DataMissing as reason:
            missing[split.name] = str(reason)
    if not evaluations:
        raise DataMissing("; ".join(missing.values()))
    return TaskData(task, train, evaluations, missing)
