"""Learning-rate and batch-size schedules as functions of the progress fraction f in [0, 1].

Cramming drives both by the elapsed fraction of the time budget rather than by step count, so a run
on a faster GPU simply sees more steps of the same schedule.
"""

import math

from cramming.errors import CrammingError

LR_SCHEDULES = ("triangle", "constant", "linear", "cosine")


def lr_multiplier(schedule: str, fraction: float, warmup_fraction: float = 0.1) -> float:
    f = min(max(fraction, 0.0), 1.0)
    if schedule == "triangle":  # rises from 0.25 to the peak at f = 0.75, then falls to 0 at f = 1
        return max(0.0, min(0.25 + f, 4.0 - 4.0 * f))
    if schedule == "constant":
        return 1.0
    if schedule == "linear":
        return 1.0 - f
    if schedule == "cosine":
        if f < warmup_fraction:
            return f / warmup_fraction
        return 0.5 * (1.0 + math.cos(math.pi * (f - warmup_fraction) / (1.0 - warmup_fraction)))
    raise CrammingError(f"train.lr_schedule={schedule!r} is unknown; choose one of {', '.join(LR_SCHEDULES)}")


def target_batch_size(fraction: float, microbatch: int, batch_size: int, ramp_fraction: float) -> float:
    """Sequences per optimizer step: linear from one microbatch at f = 0 to batch_size at ramp_fraction."""
    if ramp_fraction <= 0.0 or fraction >= ramp_fraction:
        return float(batch_size)
    return microbatch + (batch_size - microbatch) * max(fraction, 0.0) / ramp_fraction


def accumulation_steps(fraction: float, sequences_per_microbatch: int, batch_size: int, ramp_fraction: float) -> int:
    """Microbatches (across all ranks) to accumulate for the next optimizer step."""
    target = target_batch_size(fraction, sequences_per_microbatch, batch_size, ramp_fraction)
    return max(1, round(target / sequences_per_microbatch))
