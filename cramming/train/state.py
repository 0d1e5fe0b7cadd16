"""Where training stands (saved in every checkpoint) and what the loop hands every component."""

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import nn

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


@dataclass
class TrainState:
    """The training at one of the loop's named points; components read it and may act on the model."""

    model: nn.Module  # the plain model: not compiled, not wrapped by DDP
    optimizer: torch.optim.Optimizer
    progress: Progress
    clock: BudgetClock
    run_dir: Path
    device: torch.device
    tokenizer: object = None  # the dataset's (transformers) tokenizer
    nonfinite: "NonFiniteSteps | None" = None  # the skipped steps' counts, on the device until read
    # the current step, set before it runs
    fraction: float = 0.0  # schedule progress f
    lr: float = 0.0
    accumulate: int = 1  # microbatches (all ranks) planned for the step
    # the step just run
    step_loss: torch.Tensor | None = None  # mean loss, on the device (reading it would wait for the GPU)
    step_microbatches: int = 0  # microbatches run: fewer than planned when the budget ended mid-step
    step_finite: torch.Tensor | None = None  # on the device: False when a non-finite loss or gradient skipped it
    grad_norm: torch.Tensor | None = None  # of the applied step, before clipping, on the device
    validation: dict | None = None  # figures of a validation just run, for the next metrics record
