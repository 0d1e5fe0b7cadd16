"""Shared by the training tests: tiny run settings, composing them, copying and reading what a run left, and a
callback that interrupts a run as Ctrl-C would."""

import json
import shutil
from pathlib import Path

from hydra import compose, initialize_config_dir

from cramming import as_group_choices
from cramming.train.callbacks import Callback
from cramming.pretraining import PretrainConfig  # noqa: F401  (registers the schemas)
from tests.conftest import REPO_ROOT

# The zero-shot probe (on by default) adds seconds to every validation and changes nothing training computes
# (tests/train/test_validation.py): the many runs that test something else leave it out.
NO_PROBE = "train.validation.zero_shot=false"
# 64 held-out rows instead of the default 256: the same validation schedule (25/50/75% and the end) at a quarter
# of its cost, which was as much as an 8-step run's training (the default slice: the quick start's tests).
VALIDATION_ROWS = 64
SMALL_VALIDATION = f"data.validation_rows={VALIDATION_ROWS}"
# The plots (about a second of drawing at a run's end) are tested by the quick start's run and tests/train/test_plots.py
NO_PLOTS = "logging.plots=false"
# Sequences of 64 tokens instead of the default 128: every microbatch and validation at half its cost (the
# default length: the quick start's tests and the golden runs).
SHORT_ROWS = "data.seq_length=64"
# The embedded corpus as the tiny runs prepare it (a test that prepares their dataset itself passes these).
TINY_DATA = ["data=embedded", SMALL_VALIDATION, SHORT_ROWS]
TINY_RUN = [*TINY_DATA, "arch=crammed-bert-tiny", "gpu=cpu", "name=t", NO_PROBE, NO_PLOTS]
# A step-driven run: same steps and data order every time, checkpoints after every step; two microbatches a step
# (accumulation, at half the work of four).
STEP_RUN = TINY_RUN + [
    "train=steps",
    "train.max_steps=8",
    "train.batch_size=32",
    "impl.microbatch_size=16",
    "budget=1",
    "logging.every_steps=1",
    "checkpoint.interval_minutes=1e-9",
]


def compose_config(overrides: list[str]):
    """pretrain.py's config as its command line composes it (train.optim.name=lion chooses optim=lion)."""
    with initialize_config_dir(config_dir=str(REPO_ROOT / "configs"), version_base="1.3"):
        return compose("pretrain", overrides=as_group_choices(overrides))


def only_run(output_dir: Path) -> Path:
    (run_dir,) = (output_dir / "t").iterdir()
    return run_dir


def copy_run(run_dir: Path, output_dir: Path) -> Path:
    """A copy of a finished run where a run of output_dir lives (output_dir/t/<its name>), to resume or damage."""
    copy = output_dir / "t" / run_dir.name
    shutil.copytree(run_dir, copy)
    return copy


def records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


class InterruptAt(Callback):
    """Raises KeyboardInterrupt before the given step (1-based)."""

    def __init__(self, step: int):
        self.step = step

    def before_step(self, state):
        if state.progress.step + 1 == self.step:
            raise KeyboardInterrupt
