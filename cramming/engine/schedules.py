"""The schedules, functions of the progress fraction f in [0, 1]: the learning rate's multiplier (pretraining
drives f by its budget clock or max_steps, GLUE by its steps) and pretraining's batch ramp."""

import math

from cramming.errors import CrammingError

LR_SCHEDULES = ("triangle", "constant", "linear", "cosine", "wsd", "one-cycle", "inverse-sqrt")
WSD_DECAY_FRACTION = 0.2  # wsd decays linearly to zero over the last fifth of training
ONE_CYCLE_START, ONE_CYCLE_END = 1 / 25, 1 / 25 / 1e4  # torch OneCycleLR's div_factor and final_div_factor


def check_lr_schedule(schedule: str, key: str = "train.lr_schedule") -> None:
    if schedule not in LR_SCHEDULES:
        raise CrammingError(f"{key}={schedule!r} is unknown; choose one of {', '.join(LR_SCHEDULES)}")


def lr_multiplier(schedule: str, fraction: float, warmup_fraction: float = 0.1) -> float:
    """The learning rate's multiplier at progress f, a function of f alone.

    Pretraining drives f by the elapsed fraction of the time budget (or of max_steps), so a faster GPU
    simply sees more steps of the same schedule; GLUE drives it by optimizer steps. w = warmup_fraction.
    triangle (the crammed recipe): min(0.25 + f, 4 - 4f), peak at f = 0.75, zero at f = 1;
    constant; linear: 1 - f; cosine: linear warm-up over w, then cosine decay to zero;
    wsd (warm-up, stable, decay): linear warm-up over w, constant, linear decay to zero over the last
    WSD_DECAY_FRACTION; one-cycle (torch's OneCycleLR, cosine annealing): from 1/25 up to 1 at f = w, then
    down to 1/25e4 at f = 1; inverse-sqrt (the Transformer's): linear warm-up over w, then sqrt(w / f).
    """
    check_lr_schedule(schedule)
    f = min(max(fraction, 0.0), 1.0)
    if schedule == "triangle":
        return max(0.0, min(0.25 + f, 4.0 - 4.0 * f))
    if schedule == "constant":
        return 1.0
    if schedule == "linear":
        return 1.0 - f
    if schedule == "one-cycle":
        if f < warmup_fraction:
            return _cosine_between(ONE_CYCLE_START, 1.0, f / warmup_fraction)
        return _cosine_between(1.0, ONE_CYCLE_END, (f - warmup_fraction) / (1.0 - warmup_fraction))
    if f < warmup_fraction or warmup_fraction >= 1.0:
        return f / warmup_fraction
    if schedule == "wsd":
        return min(1.0, (1.0 - f) / WSD_DECAY_FRACTION)
    if schedule == "inverse-sqrt":
        return math.sqrt(warmup_fraction / f) if f > 0 else 1.0
    return _cosine_between(1.0, 0.0, (f - warmup_fraction) / (1.0 - warmup_fraction))


CLIP_SCHEDULES = ("constant", "lr")


def clip_threshold(schedule: str, grad_clip: float | None, lr_multiple: float) -> float | None:
    """The gradient-norm clip at a step: grad_clip throughout (constant), or scaled by the lr's multiplier at the
    step (lr: the clip follows the lr, so the largest update AdamW's normalisation lets through shrinks with it)."""
    if grad_clip is None or schedule == "constant":
        return grad_clip
    return grad_clip * lr_multiple


def _cosine_between(start: float, end: float, t: float) -> float:
    """From start at t = 0 to end at t = 1 along half a cosine."""
    return end + (start - end) * 0.5 * (1.0 + math.cos(math.pi * t))


def target_batch_size(fraction: float, microbatch: int, batch_size: int, ramp_fraction: float) -> float:
    """Sequences per optimizer step: linear from one microbatch at f = 0 to batch_size at ramp_fraction."""
    if ramp_fraction <= 0.0 or fraction >= ramp_fraction:
        return float(batch_size)
    return microbatch + (batch_size - microbatch) * max(fraction, 0.0) / ramp_fraction


def fitted_batch_size(expected_sequences: float, microbatch: int, batch_size: int, min_steps: int) -> float:
    """The final batch that leaves the run at least min_steps optimizer steps: the sequences it is expected to
    see over min_steps, between one microbatch and batch_size. A day's budget reaches batch_size (the crammed
    recipe unchanged); a short one keeps small batches, and so more steps, where a large batch would leave it a
    few dozen (the critical batch is small while the loss is high: McCandlish et al., 2018)."""
    return min(float(batch_size), max(float(microbatch), expected_sequences / min_steps))


def accumulation_steps(fraction: float, sequences_per_microbatch: int, batch_size: int, ramp_fraction: float) -> int:
    """Microbatches (across all ranks) to accumulate for the next optimizer step."""
    target = target_batch_size(fraction, sequences_per_microbatch, batch_size, ramp_fraction)
    return max(1, round(target / sequences_per_microbatch))
