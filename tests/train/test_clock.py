"""The budget clock: training wall time, carried across resumes."""

from cramming.train import clock as clock_module
from cramming.train.clock import BudgetClock


def test_clock_counts_from_start_and_carries_earlier_runs(monkeypatch):
    now = [100.0]
    monkeypatch.setattr(clock_module.time, "perf_counter", lambda: now[0])
    clock = BudgetClock(budget_seconds=60, elapsed_before=15)
    assert clock.elapsed == 15  # not started: only the earlier runs count
    clock.start()
    now[0] += 15
    assert clock.elapsed == 30 and clock.fraction == 0.5 and clock.remaining == 30 and not clock.expired()
    now[0] += 30
    assert clock.expired() and clock.fraction == 1.0 and clock.remaining == 0
