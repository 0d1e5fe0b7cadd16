"""How far along training is: the progress a checkpoint saves (steps, microbatches, tokens, seconds) and the
budget clock (wall time spent training, carried across resumes, or simulated time for runs that must buy the
same microbatches on any machine)."""

import contextlib
import math
import os
import time
from dataclasses import dataclass
from typing import Callable

from cramming.errors import CrammingError

# Tests (and anyone reproducing a budget-driven run exactly) set this to a number of seconds: the clock then
# reads simulated time on which every microbatch takes that long, so a run buys the same microbatches on any
# machine at any load. Read here only; training itself is unchanged.
SIMULATED_SECONDS_ENV = "CRAMMING_SIMULATED_MICROBATCH_SECONDS"


@dataclass
class Progress:
    """Where training stands, in the units the budget, the data stream and the checkpoints count; saved in every
    checkpoint, so a resumed run goes on from the same step, microbatch and clock."""

    step: int = 0  # optimizer steps taken
    microbatches: int = 0  # global microbatches consumed: the position in the data stream
    tokens: int = 0
    elapsed: float = 0.0  # training seconds, earlier runs of a resumed training included
    nonfinite_total: int = 0
    nonfinite_in_a_row: int = 0
    lost_to_crashes: float = 0.0  # seconds charged on resumes for training lost after the last checkpoint


class BudgetClock:
    """Counts training wall time (compilation and checkpoint writes included) against a budget in seconds.

    `elapsed_before` is the time spent by earlier runs of a resumed training. Measurement that is not
    training (the validation curve) runs inside `paused()` and is counted in `paused_seconds` instead.
    `time_source` gives the time in seconds (time.perf_counter; see `time_source`).
    """

    def __init__(self, budget_seconds: float, elapsed_before: float = 0.0,
                 time_source: Callable[[], float] = time.perf_counter):
        self.budget_seconds = budget_seconds
        self.elapsed_before = elapsed_before
        self.now = time_source
        self.started = None
        self.paused_seconds = 0.0  # this process, in wall seconds (what the summary reports)
        self.paused_on_clock = 0.0  # the same pauses on the time source (equal, unless it is simulated)
        self.aside_seconds = 0.0  # wall seconds of work on the clock that is not training (checkpoints, plots)

    def start(self) -> None:
        self.started = self.now()

    @contextlib.contextmanager
    def paused(self):
        began, wall = self.now(), time.perf_counter()
        try:
            yield
        finally:
            self.paused_on_clock += self.now() - began
            self.paused_seconds += time.perf_counter() - wall

    @contextlib.contextmanager
    def aside(self):
        """Work the budget charges that is not training (writing a checkpoint, redrawing the plots): the clock
        runs on, and its wall seconds are counted apart, so a speed figure can leave them out."""
        began = time.perf_counter()
        try:
            yield
        finally:
            self.aside_seconds += time.perf_counter() - began

    @property
    def not_training_seconds(self) -> float:
        """Wall seconds of this process's pauses and work aside: what a tokens/s figure leaves out."""
        return self.paused_seconds + self.aside_seconds

    @property
    def elapsed(self) -> float:
        running = self.now() - self.started - self.paused_on_clock if self.started is not None else 0.0
        return self.elapsed_before + running

    @property
    def fraction(self) -> float:
        return min(self.elapsed / self.budget_seconds, 1.0)

    @property
    def remaining(self) -> float:
        return max(self.budget_seconds - self.elapsed, 0.0)

    def expired(self) -> bool:
        return self.elapsed >= self.budget_seconds


def time_source(progress) -> Callable[[], float]:
    """time.perf_counter; with CRAMMING_SIMULATED_MICROBATCH_SECONDS=<s>, s seconds per microbatch trained
    (progress.microbatches, which counts this rank's microbatches including those before a resume)."""
    per_microbatch = simulated_microbatch_seconds()
    if per_microbatch is None:
        return time.perf_counter
    return lambda: progress.microbatches * per_microbatch


def simulated_microbatch_seconds() -> float | None:
    """CRAMMING_SIMULATED_MICROBATCH_SECONDS as a number of seconds (None: unset or empty); anything else is a
    CrammingError naming it."""
    text = os.environ.get(SIMULATED_SECONDS_ENV, "").strip()
    if not text:
        return None
    try:
        seconds = float(text)
    except ValueError:
        seconds = float("nan")
    if not (math.isfinite(seconds) and seconds > 0):
        raise CrammingError(f"{SIMULATED_SECONDS_ENV}={text!r} must be a positive number of seconds (e.g. 0.5), "
                            "or unset for the wall clock")
    return seconds
