"""How far training is and when it stops, decided alike on every rank: the progress a checkpoint saves (steps,
microbatches, tokens, seconds), the budget clock (wall time spent training, carried across resumes, or simulated
time for runs that must buy the same microbatches on any machine), the stopping rule (the clock, max_steps, a
signal, the validation curve's early stop), the progress f that drives the schedules, and how ranks agree on both.
"""

import contextlib
import math
import os
import time
from dataclasses import dataclass, field
from typing import Callable

import torch

from cramming.errors import CrammingError
from cramming.train.distributed import Distributed
from cramming.train.signals import GracefulStop

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


@dataclass
class StoppingRule:
    """By the budget clock (train.progress=budget: f is the elapsed fraction of the budget) or by steps
    (progress=steps: f = step / max_steps). The clock stops a run either way; train.max_steps too; and a
    signal (Ctrl-C, SIGTERM) after the step it arrives in."""

    progress: str  # budget | steps
    max_steps: int | None
    clock: BudgetClock
    interrupt: GracefulStop = field(default_factory=GracefulStop)
    early_stop: str | None = None  # why the validation curve stopped the run (train.validation.early_stop_*)

    def stop_early(self, why: str) -> None:
        self.early_stop = why

    def fraction(self, step: int) -> float:
        if self.progress == "steps":
            return min(step / self.max_steps, 1.0)
        return self.clock.fraction

    def at_max_steps(self, step: int) -> bool:
        return self.max_steps is not None and step >= self.max_steps

    def done(self, step: int) -> bool:
        return (self.fraction(step) >= 1.0 or self.clock.expired() or self.at_max_steps(step)
                or self.interrupt.requested or self.early_stop is not None)

    def reason(self, step: int) -> str:
        if self.interrupt.requested:
            return "interrupted"
        if self.early_stop is not None:
            return "early_stop"
        return "max_steps" if self.at_max_steps(step) else "budget"


class LocalAgreement:
    """What the loop, the step and the validation curve decide from the stopping rule: the progress f of a step
    (schedules, techniques, validation), whether to stop before a step, and whether the budget ran out inside
    one. One process decides from its own clock, at every step and microbatch: there is no rank to agree with."""

    def __init__(self, stopping: StoppingRule):
        self.stopping = stopping

    def fraction(self, progress: Progress) -> float:
        return self.stopping.fraction(progress.step)

    def should_stop(self, progress: Progress) -> bool:
        return self.stopping.done(progress.step)

    def budget_ran_out(self) -> bool:
        """Asked before each microbatch after a step's first: a budget-driven run takes a shorter last step."""
        return self.stopping.progress == "budget" and self.stopping.clock.expired()


class RankAgreement(LocalAgreement):
    """Under torchrun every rank must take the same decisions at the same step (a different f is a different
    batch ramp or layer drop; a rank that stops alone leaves the others waiting in a collective), yet a host
    read of a collective per step would make each GPU wait for the slowest step of all.

    So the ranks agree at reads: every `every` steps (where the non-finite counts are read too) they all-reduce (on
    the device) their clocks and stop requests and the host reads the maximum, one wait. Between reads, f is
    extrapolated from the agreed clock and the agreed seconds per microbatch, a function of what every rank shares
    (the microbatch count), so it is the same number everywhere. When the agreed clock says the budget may end
    before the next read (or the pace is not known yet: the first steps, compilation included), they read at every
    step and, inside the step, at every microbatch: all stop at the same microbatch and the budget holds. A signal
    that reaches some ranks stops them all at the next read.
    """

    SAFETY = 2.0  # the projection allows the next steps twice the pace of the last ones

    def __init__(self, stopping: StoppingRule, dist: Distributed, every: int, device: torch.device,
                 accumulate: Callable[[float], int]):
        super().__init__(stopping)
        self.dist, self.every, self.device, self.accumulate = dist, every, device, accumulate
        self.read_at: tuple[int, float] | None = None  # (microbatches, agreed elapsed seconds) at the last read
        self.seconds_per_microbatch: float | None = None  # agreed, over the last window between reads
        self.next_read = 0  # the step before which the ranks read next
        self.near_end = True  # read at every step and microbatch

    def fraction(self, progress: Progress) -> float:
        if self.stopping.progress == "steps":
            return self.stopping.fraction(progress.step)
        microbatches, elapsed = self.read_at or (progress.microbatches, self.stopping.clock.elapsed_before)
        if self.seconds_per_microbatch is not None:
            elapsed += (progress.microbatches - microbatches) * self.seconds_per_microbatch
        return min(elapsed / self.stopping.clock.budget_seconds, 1.0)

    def should_stop(self, progress: Progress) -> bool:
        if self.stopping.at_max_steps(progress.step) or self.stopping.early_stop is not None:
            return True  # the same on every rank: the step count, a validation loss reduced over the ranks
        if progress.step >= self.next_read or self.fraction(progress) >= 1.0:
            return self._read(progress)
        return False

    def budget_ran_out(self) -> bool:
        if self.stopping.progress != "budget" or not self.near_end:
            return False
        expired = torch.tensor([float(self.stopping.clock.expired())], device=self.device)
        return bool(self.dist.max(expired).item())  # near the end only: a host wait per microbatch

    def _read(self, progress: Progress) -> bool:
        interrupt = self.stopping.interrupt
        mine = torch.tensor([self.stopping.clock.elapsed, float(interrupt.signum or 0)], dtype=torch.float64,
                            device=self.device)
        elapsed, signum = self.dist.max(mine).tolist()  # the one host wait
        if signum and not interrupt.requested:
            interrupt.signum = int(signum)  # so that every rank stops as interrupted, with the same exit code
        if self.read_at is not None and progress.microbatches > self.read_at[0]:
            self.seconds_per_microbatch = (elapsed - self.read_at[1]) / (progress.microbatches - self.read_at[0])
        self.read_at = (progress.microbatches, elapsed)
        budget = self.stopping.clock.budget_seconds
        if signum or elapsed >= budget:
            return True
        pace = self.seconds_per_microbatch
        ahead = float("inf") if pace is None else self.SAFETY * self.every * self.accumulate(elapsed / budget) * pace
        self.near_end = elapsed + ahead >= budget
        # near the end: the next step; else with the non-finite counts (NonFiniteSteps, below), every `every` steps
        self.next_read = progress.step + 1 if self.near_end else (progress.step // self.every + 1) * self.every
        return False


def agreement(stopping: StoppingRule, dist: Distributed, every: int, device: torch.device,
              accumulate: Callable[[float], int]) -> LocalAgreement:
    """The agreement for this run: one process needs none."""
    if not dist.enabled:
        return LocalAgreement(stopping)
    return RankAgreement(stopping, dist, every, device, accumulate)
