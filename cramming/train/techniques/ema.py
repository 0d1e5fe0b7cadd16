"""An exponential moving average of the weights (Polyak & Juditsky, 1992, "Acceleration of Stochastic
Approximation by Averaging"; as in Izmailov et al., 2018 and most diffusion and vision recipes):
`train.ema.decay=<d>`.

After every optimizer step the average moves towards the weights: a <- a + (1 - d_n)(w - a), with
d_n = min(d, (1 + n) / (10 + n)) after n steps, so the early average is not dominated by the
initialization. The average is kept in fp32 on the device (one more copy of the weights: the microbatch
search counts it), is updated inside the step (the budget clock charges it) and rides in every checkpoint,
so a resumed run continues exactly. Training itself runs on the raw weights; when training ends (not on an
interruption, whose checkpoint a resume continues from) the average replaces them, so the final validation,
the final checkpoint, GLUE and the export all see the averaged model.
"""

import logging
from dataclasses import dataclass

import torch

from cramming.errors import require
from cramming.plugins import Setting
from cramming.train.callbacks import TrainState
from cramming.train.techniques.base import RunContext, Technique, parameter_bytes

log = logging.getLogger("pretrain")
WARMUP = 10  # d_n = min(d, (1 + n) / (WARMUP + n))


@dataclass
class EmaConfig:
    """`train.ema`: the final model is the moving average of the weights; off at decay 0."""

    decay: float = 0.0  # per optimizer step, in [0, 1); e.g. 0.999 averages over about the last 1000 steps


class Ema(Technique):
    name, override = "ema", "train.ema"
    switch = "train.ema.decay"
    settings = (Setting("train.ema", EmaConfig),)
    variant_overrides = ("train.ema.decay=0.999",)
    conflicts = {"stacking": "do not combine: a grown layer's average would mix in its weights from before it "
                             "was copied",
                 "sparsity": "do not combine: the average of a pruned weight is not zero, so the final model "
                             "would not be sparse"}

    def __init__(self, decay: float):
        self.decay = decay
        self.average: list[torch.Tensor] = []  # fp32, one per parameter, in model.parameters() order
        self.updates = 0

    @classmethod
    def check(cls, cfg) -> None:
        decay = cfg.train.ema.decay
        require([(0 <= decay < 1, f"train.ema.decay={decay} must be in [0, 1) (0: off)")])

    @classmethod
    def build(cls, cfg, run: RunContext) -> "Ema":
        return cls(cfg.train.ema.decay)

    def extra_memory(self, model: torch.nn.Module) -> int:
        return parameter_bytes(model, torch.float32)

    @torch.no_grad()
    def on_train_start(self, state: TrainState) -> None:
        """A new run starts its average at the initial weights; a resumed one has its own from the checkpoint."""
        parameters = list(state.model.parameters())
        if not self.average:
            self.average = [p.detach().float().clone() for p in parameters]
        self.average = [a.to(p.device) for a, p in zip(self.average, parameters)]

    @torch.no_grad()
    def after_optimizer_step(self, state: TrainState) -> None:
        decay = min(self.decay, (1 + self.updates) / (WARMUP + self.updates))
        weights = [p.detach().float() for p in state.model.parameters()]
        # A step skipped on the device for non-finite values (cramming.train.nonfinite.NonFiniteSteps) moves
        # nothing; the flag is not read here, so n counts steps taken, skipped ones included.
        step = torch.where(state.step_finite, 1 - decay, 0.0)
        torch._foreach_lerp_(self.average, weights, [step] * len(weights))
        self.updates += 1

    @torch.no_grad()
    def on_train_end(self, state: TrainState, reason: str) -> None:
        if reason == "interrupted":  # the checkpoint keeps the raw weights and the average: a resume goes on
            return
        for parameter, average in zip(state.model.parameters(), self.average):
            parameter.copy_(average)
        log.info("ema: the final model is the average of the weights (decay %g, %d updates)", self.decay, self.updates)

    def state_dict(self) -> dict:
        return {"average": [a.cpu() for a in self.average], "updates": self.updates} if self.average else {}

    def load_state_dict(self, state: dict) -> None:
        self.average, self.updates = list(state["average"]), state["updates"]
