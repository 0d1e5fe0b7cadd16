"""When training stops, and how far along it is (the progress f that drives the schedules), decided alike on
every rank: the budget clock (wall time spent training, carried across resumes), the signals that ask for a stop
(Ctrl-C and SIGTERM: the first stops after the current step, with a checkpoint and one line saying how to
resume; a second exits at once), the stopping rule, how ranks agree on all of it, and a diverged run: its
non-finite steps counted on the device, and what it tells its user (at the end of this file).

Non-finite steps: reading a step's flag as a Python bool makes the host wait for the GPU at every step, which
then idles while Python launches the next step's kernels. So the step only adds its flag to counters on the
device; `settle` reads them (one host sync) every `train.check_nonfinite_every` steps, before a metrics record or
a checkpoint, and at the end. A diverged run therefore stops at the first read after its limit was reached; the
error still names the step where it was reached, and the updates of the skipped steps in between were never
applied (the optimizer skips them on the device: cramming.gradient_step).
"""

import contextlib
import logging
import math
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch

from cramming.errors import CrammingError
from cramming.train.distributed import Distributed

# Tests (and anyone reproducing a budget-driven run exactly) set this to a number of seconds: the clock then
# reads simulated time on which every microbatch takes that long, so a run buys the same microbatches on any
# machine at any load. Read here only; training itself is unchanged.
SIMULATED_SECONDS_ENV = "CRAMMING_SIMULATED_MICROBATCH_SECONDS"

log = logging.getLogger("pretrain")


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


SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(CrammingError):
    """The run stopped on a signal after writing a checkpoint; the exit code says which (130, 143)."""

    label = "interrupted"

    def __init__(self, message: str, signum: int):
        super().__init__(message)
        self.exit_code = 128 + signum


class GracefulStop:
    """A context in which the first SIGINT/SIGTERM only sets `signum`; the loop stops at its next check."""

    def __init__(self):
        self.signum: int | None = None
        self.previous = {}

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def __enter__(self) -> "GracefulStop":
        if threading.current_thread() is threading.main_thread():  # signals are only delivered there
            self.previous = {signum: signal.signal(signum, self._handle) for signum in SIGNALS}
        return self

    def __exit__(self, *exc) -> None:
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)

    def _handle(self, signum: int, frame) -> None:
        name = signal.Signals(signum).name
        if self.signum is not None:
            print(f"interrupted: second {name}: exiting now, without a checkpoint", file=sys.stderr, flush=True)
            os._exit(128 + signum)
        self.signum = signum
        print(f"{name}: stopping after this step and writing a checkpoint ({name} again exits at once)",
              file=sys.stderr, flush=True)


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

    So the ranks agree at reads: every `every` steps (where the non-finite counts are read too) they all-reduce
    (on the device) their clocks and stop requests and the host reads the maximum, one wait. Between reads, f is extrapolated from the agreed clock
    and the agreed seconds per microbatch, a function of what every rank shares (the microbatch count), so it
    is the same number everywhere. When the agreed clock says the budget may end before the next read (or the
    pace is not known yet: the first steps, compilation included), they read at every step and, inside the
    step, at every microbatch: all stop at the same microbatch and the budget holds. A signal that reaches
    some ranks stops them all at the next read.
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


# --- a diverged run ----------------------------------------------------------------------------------


LOSS, GRADIENT, IN_A_ROW, LIMIT_AT = range(4)  # the counters' slots


class NonFiniteLossError(CrammingError):
    """Too many non-finite steps (loss or gradient norm) in a row: the run stops (after writing its summary)."""


class NonFiniteSteps:
    """Skipped steps since the last read (by cause), the running count in a row, and the first step at which
    that count reached `limit` (0: not yet); all on the device until `settle`."""

    def __init__(self, limit: int, every: int, device: torch.device, progress: Progress):
        self.limit, self.every = limit, every
        self.counts = torch.tensor([0, 0, progress.nonfinite_in_a_row, 0], device=device)  # int64
        self.read_after_step = progress.step  # the steps after it are not read yet
        self.limit_at = 0

    def observe(self, loss_finite: torch.Tensor, gradient_finite: torch.Tensor, step_number: int) -> torch.Tensor:
        """Count step `step_number` (1-based); returns its flag (True: applied), all without a host sync."""
        finite = loss_finite & gradient_finite
        in_a_row = (self.counts[IN_A_ROW] + 1) * (~finite)
        reached = (in_a_row >= self.limit) & (self.counts[LIMIT_AT] == 0)
        self.counts = torch.stack([
            self.counts[LOSS] + (~loss_finite),
            self.counts[GRADIENT] + (loss_finite & ~gradient_finite),
            in_a_row,
            torch.where(reached, step_number, self.counts[LIMIT_AT]),
        ])
        return finite

    def due(self, step_number: int) -> bool:
        """Whether the loop reads the counters after step `step_number` (every `every` steps)."""
        return step_number % self.every == 0

    def settle(self, progress: Progress, through_step: int) -> None:
        """`read`, then stop a run that reached the limit. Only the loop settles, at the same steps on every
        rank, so that all ranks stop together."""
        if self.read(progress, through_step):
            raise NonFiniteLossError(f"{self.limit} non-finite steps in a row at step {self.limit_at}: the run "
                                     "diverged and stopped")

    def read(self, progress: Progress, through_step: int) -> bool:
        """Read the counters into `progress` (steps up to `through_step` have run) and warn about the steps
        skipped since the last read; True once the limit was reached."""
        loss, gradient, in_a_row, self.limit_at = self.counts.tolist()
        first, self.read_after_step = self.read_after_step + 1, through_step
        self.counts[LOSS:IN_A_ROW] = 0  # the running count in a row goes on
        progress.nonfinite_total += loss + gradient
        progress.nonfinite_in_a_row = in_a_row
        if loss + gradient:
            log.warning("%s", _skipped_message(first, through_step, loss, gradient, in_a_row))
        return self.limit_at > 0


def _skipped_message(first: int, last: int, loss: int, gradient: int, in_a_row: int) -> str:
    if first == last:  # read every step: one line per skipped step, as the skip happened
        cause = "loss" if loss else "gradient norm"
        return f"step {last}: non-finite {cause}, step skipped ({in_a_row} in a row)"
    causes = ", ".join(f"{cause}: {count}" for cause, count in (("loss", loss), ("gradient norm", gradient)) if count)
    skipped = f"{loss + gradient} non-finite step{'s' if loss + gradient > 1 else ''}"
    return f"steps {first}-{last}: {skipped} skipped ({causes}), {in_a_row} in a row at step {last}"


def resume_advice(last_good: Path | None) -> str:
    """The learning rate is blamed (an init far above the recipe's is refused before training: arch.init_std):
    go on from the last good checkpoint with a lower one, or start again with one."""
    if last_good is None:
        return "no checkpoint was written before it diverged: start again with a lower train.optim.lr"
    return (f"the last good checkpoint is {last_good}; to go on from it with a lower learning rate, run the same "
            f"command with resume={last_good} train.optim.lr=<lower>")
