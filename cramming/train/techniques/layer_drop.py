"""Progressive layer dropping (Zhang & He, 2020, "Accelerating Training of Transformer-Based Language
Models with Progressive Layer Dropping"): `train.layer_drop.max_rate=<p>`.

Each step skips some layers outright (their input passes through; a skipped layer costs no compute and
gets no gradient), deeper layers more often and more as training goes on: at progress f, layer i of L
(1-based) is dropped with probability i/L * max_rate * (1 - exp(-f / rise_fraction)), the paper's schedule
with its keep-rate floor 1 - max_rate. A step's draws come from a generator seeded by (train seed, step), so
a resumed run drops the same layers as an uninterrupted one. Kept layers are not rescaled (as in the
paper); validation and the exported model run every layer.
"""

import math
from dataclasses import dataclass

import torch

from cramming.errors import CrammingError, require
from cramming.plugins import Setting
from cramming.train.callbacks import TrainState
from cramming.train.techniques.base import RunContext, Technique


@dataclass
class LayerDropConfig:
    """`train.layer_drop`; off at max_rate 0."""

    max_rate: float = 0.0  # the deepest layer's drop probability once the rate has risen; layer i of L: i/L of it
    rise_fraction: float = 0.1  # the rate rises as 1 - exp(-f / rise_fraction) with progress f


def drop_rates(fraction: float, num_layers: int, max_rate: float, rise_fraction: float) -> torch.Tensor:
    """Each layer's drop probability at progress `fraction`, shallow to deep: (num_layers,)."""
    risen = max_rate * (1 - math.exp(-fraction / rise_fraction))
    return torch.arange(1, num_layers + 1) / num_layers * risen


class LayerDrop(Technique):
    name, override = "layer-drop", "train.layer_drop"
    switch = "train.layer_drop.max_rate"
    settings = (Setting("train.layer_drop", LayerDropConfig),)
    conflicts = {"stacking": "both set the layers a step runs: use one at a time"}

    def __init__(self, max_rate: float, rise_fraction: float, seed: int):
        self.max_rate, self.rise_fraction, self.seed = max_rate, rise_fraction, seed

    @classmethod
    def check(cls, cfg) -> None:
        drop = cfg.train.layer_drop
        require([(0 <= drop.max_rate < 1, f"train.layer_drop.max_rate={drop.max_rate} must be in [0, 1) (0: off)"),
                 (drop.rise_fraction > 0, f"train.layer_drop.rise_fraction={drop.rise_fraction} must be positive")])

    @classmethod
    def build(cls, cfg, run: RunContext) -> "LayerDrop":
        if run.world_size > 1:
            raise CrammingError("train.layer_drop runs a different set of layers per step, which "
                                "DistributedDataParallel does not support: run it on one GPU")
        if run.compile:
            raise CrammingError("train.layer_drop would recompile the model for each set of dropped layers: add "
                                "impl.compile=false")
        drop = cfg.train.layer_drop
        return cls(drop.max_rate, drop.rise_fraction, cfg.train.seed)

    def before_step(self, state: TrainState) -> None:
        encoder = state.model.bert
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + state.progress.step)
        draws = torch.rand(len(encoder.layer), generator=generator)
        rates = drop_rates(state.fraction, len(encoder.layer), self.max_rate, self.rise_fraction)
        encoder.skip_layers = frozenset((draws < rates).nonzero().flatten().tolist())

    def after_step(self, state: TrainState) -> None:
        state.model.bert.skip_layers = frozenset()  # validation and checkpoints see the whole model
