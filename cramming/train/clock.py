"""The budget clock: wall time spent training, carried across resumes."""

import time


class BudgetClock:
    """Counts training wall time (compilation and checkpoint writes included) against a budget in seconds.

    `elapsed_before` is the time spent by earlier runs of a resumed training.
    """

    def __init__(self, budget_seconds: float, elapsed_before: float = 0.0):
        self.budget_seconds = budget_seconds
        self.elapsed_before = elapsed_before
        self.started = None

    def start(self) -> None:
        self.started = time.perf_counter()

    @property
    def elapsed(self) -> float:
        running = time.perf_counter() - self.started if self.started is not None else 0.0
        return self.elapsed_before + running

    @property
    def fraction(self) -> float:
        return min(self.elapsed / self.budget_seconds, 1.0)

    @property
    def remaining(self) -> float:
        return max(self.budget_seconds - self.elapsed, 0.0)

    def expired(self) -> bool:
        return self.elapsed >= self.budget_seconds
