"""Progressive stacking (Gong et al., 2019, "Efficient Training of BERT by Progressively Stacking"):
`train.stacking.stages=[4,8,16]`.

Training starts with the first stage's number of layers; at each later stage's start (equal shares of
progress, or `train.stacking.at`) the model grows by copying its trained layers on top of themselves: new
layer j copies layer j mod n, n the layers trained so far. The model is built at full depth from the start;
layers not yet grown into are skipped (no compute, no gradient, no weight decay). The optimizer state of
each copied parameter (e.g. AdamW's moments) is copied with it, so a copy continues as its source would.
The stage is checkpointed: a resume after a growth step continues at the grown depth. A run that ends
before its last stage is grown at the end, so the final model always has arch.num_layers layers.
"""

import logging
from dataclasses import dataclass, field
from typing import Optional

import torch

from cramming.errors import CrammingError, require
from cramming.plugins import Setting
from cramming.train.callbacks import TrainState
from cramming.train.techniques.base import RunContext, Technique

log = logging.getLogger("pretrain")


@dataclass
class StackingConfig:
    """`train.stacking`; off when `stages` is empty."""

    stages: list[int] = field(default_factory=list)  # layer counts, e.g. [4, 8, 16]; the last is arch.num_layers
    at: Optional[list[float]] = None  # progress fractions at which stages 2, 3, ... start; null: equal shares


def stage_starts(stages: list[int], at: list[float] | None) -> list[float]:
    """The progress fraction at which each stage starts: 0, then `at` or equal shares."""
    return [0.0, *(at if at is not None else [k / len(stages) for k in range(1, len(stages))])]


def copy_optimizer_state(optimizer: torch.optim.Optimizer, source: torch.nn.Parameter,
                         target: torch.nn.Parameter) -> None:
    """target's optimizer state becomes a copy of source's (none if source has none yet)."""
    optimizer.state.pop(target, None)
    if source in optimizer.state:
        optimizer.state[target] = {key: value.clone() if torch.is_tensor(value) else value
                                   for key, value in optimizer.state[source].items()}


class Stacking(Technique):
    name, override = "stacking", "train.stacking"
    switch = "train.stacking.stages"
    settings = (Setting("train.stacking", StackingConfig),)

    def __init__(self, stages: list[int], at: list[float] | None):
        self.stages, self.starts = list(stages), stage_starts(stages, at)
        self.stage = 0  # index into stages

    @classmethod
    def check(cls, cfg) -> None:
        stages, at = list(cfg.train.stacking.stages), cfg.train.stacking.at
        require([
            (not stages or (len(stages) >= 2 and all(isinstance(n, int) and n >= 1 for n in stages)
                            and all(a < b for a, b in zip(stages, stages[1:]))),
             f"train.stacking.stages={stages} must be two or more increasing layer counts, e.g. [4,8,16]"),
            (not stages or stages[-1] == cfg.arch.num_layers,
             f"train.stacking.stages={stages} must end at arch.num_layers={cfg.arch.num_layers}"),
            (at is None or stages, "train.stacking.at needs train.stacking.stages"),
            (at is None or not stages or (len(at) == len(stages) - 1 and all(0 < f < 1 for f in at)
                                          and all(a < b for a, b in zip(at, list(at)[1:]))),
             f"train.stacking.at={list(at or [])} must hold one fraction in (0, 1) per stage after the first "
             f"({len(stages) - 1}), increasing"),
        ])

    @classmethod
    def build(cls, cfg, run: RunContext) -> "Stacking":
        if run.world_size > 1:
            raise CrammingError("train.stacking runs a different set of layers per step, which "
                                "DistributedDataParallel does not support: run it on one GPU")
        return cls(list(cfg.train.stacking.stages), cfg.train.stacking.at)

    def on_train_start(self, state: TrainState) -> None:
        self._skip_beyond(state, self.stages[self.stage])

    def before_step(self, state: TrainState) -> None:
        due = max(k for k, start in enumerate(self.starts) if start <= state.fraction)
        while self.stage < due:
            self._grow(state)

    def on_train_end(self, state: TrainState, reason: str) -> None:
        if reason != "interrupted" and self.stage < len(self.stages) - 1:  # an interrupted run resumes as it was
            log.warning("stacking: training ended at %d layers; copying up to %d for the final model",
                        self.stages[self.stage], self.stages[-1])
            while self.stage < len(self.stages) - 1:
                self._grow(state)

    @torch.no_grad()
    def _grow(self, state: TrainState) -> None:
        layers = state.model.bert.layer
        trained, grown = self.stages[self.stage], self.stages[self.stage + 1]
        for j in range(trained, grown):
            source, target = layers[j % trained], layers[j]
            target.load_state_dict(source.state_dict())
            for source_parameter, target_parameter in zip(source.parameters(), target.parameters()):
                copy_optimizer_state(state.optimizer, source_parameter, target_parameter)
        self.stage += 1
        self._skip_beyond(state, grown)
        log.info("stacking: grew from %d to %d layers at step %d (%.0f%% of training)", trained, grown,
                 state.progress.step, 100 * state.fraction)

    @staticmethod
    def _skip_beyond(state: TrainState, depth: int) -> None:
        state.model.bert.skip_layers = frozenset(range(depth, len(state.model.bert.layer)))

    def state_dict(self) -> dict:
        return {"stage": self.stage}

    def load_state_dict(self, state: dict) -> None:
        self.stage = state["stage"]
