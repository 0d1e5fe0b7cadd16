"""What a training technique is: a Callback (the loop's named points) plus the events the set-up offers it
(the model, the optimizer, the data stream, the step class, the memory it adds), its config checks and the
techniques it cannot run with. The trainer builds the enabled ones from `TECHNIQUES` and calls the events."""

from dataclasses import dataclass
from typing import Iterator

import torch

from cramming.data.stream import Microbatches
from cramming.errors import CrammingError
from cramming.train.callbacks import Callback


@dataclass(frozen=True)
class RunContext:
    """What a technique may check against or build from, once the run's settings are known."""

    device: torch.device
    compile: bool
    precision: str  # fp32 | bf16 | fp16
    world_size: int


class Technique(Callback):
    """One technique. Class level (before it exists): `label` (the override users type, for messages),
    `enabled(cfg)`, `check(cfg)` (its values, before any data), `conflicts` and `build(cfg, run)` (the checks
    that need the device, then the instance). Instance level: the Callback points, and the set-up events below,
    each a no-op by default."""

    label: str = ""  # e.g. "train.layer_drop": names the technique in one-line errors
    # technique class name -> why the two do not combine; the message reads "<label> and <other label> <why>"
    conflicts: dict[str, str] = {}

    @staticmethod
    def enabled(cfg) -> bool:
        raise NotImplementedError

    @staticmethod
    def check(cfg) -> None:
        """Raise CrammingError naming the first value out of its domain (called whether enabled or not)."""

    @classmethod
    def build(cls, cfg, run: RunContext) -> "Technique":
        raise NotImplementedError

    def on_model(self, model: torch.nn.Module) -> None:
        """Model surgery, before the optimizer is built and before any weights are loaded into the model."""

    def wrap_optimizer(self, optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
        return optimizer

    def stream(self, microbatches: Microbatches, start: int) -> Iterator[dict] | None:
        """The microbatches from global microbatch `start` on, if this technique draws them (None: it does not)."""
        return None

    def wrap_step(self, step_class: type) -> type:
        """The step class (a cramming.train.step.TrainStep) the trainer builds; return a subclass to change it."""
        return step_class

    def extra_memory(self, model: torch.nn.Module) -> int:
        """Bytes of GPU memory this technique holds beside a plain step's, for the microbatch search."""
        return 0


def require(rules: list[tuple[bool, str]]) -> None:
    """Raise the message of the first rule that does not hold."""
    for ok, message in rules:
        if not ok:
            raise CrammingError(message)


def parameter_bytes(model: torch.nn.Module, dtype: torch.dtype | None = None) -> int:
    """The bytes of a copy of the model's parameters (in `dtype`, else their own)."""
    size = torch.tensor([], dtype=dtype).element_size() if dtype else None
    return sum(p.numel() * (size or p.element_size()) for p in model.parameters())
