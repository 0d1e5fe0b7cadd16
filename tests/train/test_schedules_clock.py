import pytest

from cramming.errors import CrammingError
from cramming.train import clock as clock_module
from cramming.train.clock import BudgetClock
from cramming.train.schedules import accumulation_steps, lr_multiplier, target_batch_size


@pytest.mark.parametrize(("fraction", "expected"), [(0.0, 0.25), (0.6, 0.85), (0.75, 1.0), (1.0, 0.0), (0.9, 0.4)])
def test_triangle_lr(fraction, expected):
    assert lr_multiplier("triangle", fraction) == pytest.approx(expected)


def test_other_lr_schedules():
    assert lr_multiplier("constant", 0.6) == 1.0
    assert lr_multiplier("linear", 0.75) == pytest.approx(0.25)
    assert lr_multiplier("cosine", 0.05, warmup_fraction=0.1) == pytest.approx(0.5)
    assert lr_multiplier("cosine", 0.55, warmup_fraction=0.1) == pytest.approx(0.5)
    assert lr_multiplier("cosine", 1.0) == pytest.approx(0.0)
    with pytest.raises(CrammingError, match="lr_schedule='warmup' is unknown"):
        lr_multiplier("warmup", 0.5)


@pytest.mark.parametrize(("fraction", "expected"), [(0.0, 128), (0.3, 4160), (0.6, 8192), (0.75, 8192), (1.0, 8192)])
def test_batch_ramp(fraction, expected):
    assert target_batch_size(fraction, 128, 8192, 0.6) == pytest.approx(expected)


def test_accumulation_follows_the_ramp():
    assert accumulation_steps(0.0, 128, 8192, 0.6) == 1
    assert accumulation_steps(0.3, 128, 8192, 0.6) == 32  # 4160 / 128 = 32.5, rounded to even
    assert accumulation_steps(0.6, 128, 8192, 0.6) == 64
    assert accumulation_steps(1.0, 256, 8192, 0.6) == 32  # two ranks of 128
    assert accumulation_steps(0.5, 128, 64, 0.6) == 1  # never below one microbatch


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
