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

import torch

from cramming.train.callbacks import Callback
from cramming.train.state import TrainState


def drop_rates(fraction: float, num_layers: int, max_rate: float, rise_fraction: float) -> torch.Tensor:
    """Each layer's drop probability at progress `fraction`, shallow to deep: (num_layers,)."""
    risen = max_rate * (1 - math.exp(-fraction / rise_fraction))
    return torch.arange(1, num_layers + 1) / num_layers * risen


class LayerDrop(Callback):
    def __init__(self, max_rate: float, rise_fraction: float, seed: int):
        self.max_rate, self.rise_fraction, self.seed = max_rate, rise_fraction, seed

    def before_step(self, state: TrainState) -> None:
        encoder = state.model.bert
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + state.progress.step)
        draws = torch.rand(len(encoder.layer), generator=generator)
        rates = drop_rates(state.fraction, len(encoder.layer), self.max_rate, self.rise_fraction)
        encoder.skip_layers = frozenset((draws < rates).nonzero().flatten().tolist())

    def after_step(self, state: TrainState) -> None:
        state.model.bert.skip_layers = frozenset()  # validation and checkpoints see the whole model
