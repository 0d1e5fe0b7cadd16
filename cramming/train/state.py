"""Where training stands (saved in every checkpoint) and what the loop hands every component."""

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from cramming.gradient_step import StepState
from cramming.train.clock import BudgetClock

if TYPE_CHECKING:
    from cramming.train.nonfinite import NonFiniteSteps


@dataclass
class Progress:
    step: int = 0  # optimizer steps taken
    microbatches: int = 0  # global microbatches consumed: the position in the data stream
    tokens: int = 0
    elapsed: float = 0.0  # training seconds, earlier runs of a resumed training included
    nonfinite_total: int = 0
    nonfinite_in_a_row: int = 0
    lost_to_crashes: float = 0.0  # seconds charged on resumes for training lost after the last checkpoint


@dataclass(kw_only=True)
class TrainState(StepState):
    """The training at one of the loop's named points; components read it and may act on the model. The step's
    own fields (the model, accumulate, and what the step just run left: its loss, microbatches, gradient norm and
    finite flag) are StepState's."""

    optimizer: torch.optim.Optimizer | None
    progress: Progress
    clock: BudgetClock | None
    run_dir: Path | None
    tokenizer: object = None  # the dataset's (transformers) tokenizer
    nonfinite: "NonFiniteSteps | None" = None  # the skipped steps' counts, on the device until read
    # the current step, set before it runs (with accumulate: the microbatches planned, on every rank)
    fraction: float = 0.0  # schedule progress f
    lr: float = 0.0
    validation: dict | None = None  # figures of a validation just run, for the next metrics record
