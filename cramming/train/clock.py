"""The budget clock: wall time spent training, carried across resumes."""

import contextlib
import time


class BudgetClock:
    """Counts training wall time (compilation and checkpoint writes included) against a budget in seconds.

    `elapsed_before` is the time spent by earlier runs of a resumed training. Measurement that is not
    training (the validation curve) runs inside `paused()` and is counted in `paused_seconds` instead.
    """

    def __init__(self, budget_seconds: float, elapsed_before: float = 0.0):
        self.budget_seconds = budget_seconds
        self.elapsed_before = elapsed_before
        self.started = None
        self.paused_seconds = 0.0  # this process

    def start(self) -> None:
        self.started = time.perf_counter()

    @contextlib.contextmanager
    def paused(self):
        began = time.perf_counter()
        try:
            yield
        finally:
            self.paused_seconds += time.perf_counter() - began

    @property
    def elapsed(self) -> float:
        running = time.perf_counter() - self.started - self.paused_seconds if self.started is not None else 0.0
        return self.elapsed_before + running

    @property
    def fraction(self) -> float:
        return min(self.elapsed / self.budget_seconds, 1.0)

    @property
    def remaining(self) -> float:
        return max(self.budget_seconds - self.elapsed, 0.0)

    def expired(self) -> bool:
        return self.elapsed >= self.budget_seconds
