"""The mask rate scheduled over the run: `train.mask_schedule=[0.3,0.25,0.2,0.15]`.

A high mask rate early gives each sequence more predictions while the model learns word statistics; a lower one
late gives each prediction more context (GPT-BERT, Charpentier & Samuel, 2024, the BabyLM 2024 winner, scheduled
it from 30% down to 15%; Wettig et al., 2023, "Should You Mask 15% in Masked Language Modeling?", found 40% as
good as 15% at BERT-large scale). The run goes through the listed rates in equal parts of its progress f (the
budget clock's, or max_steps'): with n rates, rate i from f = i/n. Each rate is one masked-position count per
row, one static shape, so a compiled model compiles n times at most.

The masks are drawn in the training process, from the same rows and the same seeds as the data stream's, at the
rate of the moment; a resumed run, whose progress is restored, masks as the uninterrupted one would. Validation
and the FLOPs figures keep `train.mlm_rate`, so their numbers compare with other runs'.
"""

from cramming.data.mlm import MLMCollator
from cramming.data.stream import Microbatches
from cramming.errors import require
from cramming.plugins import Setting
from cramming.train.callbacks import TrainState
from cramming.train.techniques.base import RunContext, Technique


def rate_at(rates: list[float], fraction: float) -> float:
    """The scheduled rate at progress `fraction`: rate i over [i/n, (i+1)/n)."""
    return rates[min(int(max(fraction, 0.0) * len(rates)), len(rates) - 1)]


class MaskSchedule(Technique):
    name, override = "mask-schedule", "train.mask_schedule"
    switch = "train.mask_schedule"
    # the mask rates, in equal parts of the run ([] : train.mlm_rate throughout)
    settings = (Setting("train.mask_schedule", list[float], []),)
    conflicts = {"importance-sampling": "both draw the microbatches: use one at a time"}

    def __init__(self, rates: list[float]):
        self.rates, self.fraction = rates, 0.0
        self.collators: dict[float, MLMCollator] = {}

    @classmethod
    def check(cls, cfg) -> None:
        rates = list(cfg.train.mask_schedule)
        require([(all(0 < rate < 1 for rate in rates),
                  f"train.mask_schedule={rates} must list mask rates between 0 and 1 ([]: off)")])

    @classmethod
    def build(cls, cfg, run: RunContext) -> "MaskSchedule":
        return cls(list(cfg.train.mask_schedule))

    def before_step(self, state: TrainState) -> None:
        self.fraction = state.fraction

    def stream(self, microbatches: Microbatches, start: int):
        """Endless microbatches from global microbatch `start` on: the stream's rows, masked at the current rate."""
        base = microbatches.collate
        for index in range(start, 2**62):
            rate = rate_at(self.rates, self.fraction)
            if rate not in self.collators:
                self.collators[rate] = MLMCollator(base.vocab_size, rate, base.seed)
            first = (index * microbatches.world_size + microbatches.rank) * microbatches.microbatch_size
            yield self.collators[rate](microbatches.rows.batch(first, microbatches.microbatch_size))
