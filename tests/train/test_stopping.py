"""The stopping rule: progress by budget or by steps, max_steps as a hard stop, always a plain bool."""

from cramming.train.clock import BudgetClock
from cramming.train.stopping import StoppingRule


def test_budget_progress_without_max_steps_gives_plain_booleans():
    clock = BudgetClock(budget_seconds=100.0, elapsed_before=40.0)
    rule = StoppingRule("budget", None, clock)
    assert rule.fraction(10) == 0.4
    assert rule.done(10) is False  # not None: torchrun's "any rank done" reduction needs a number
    assert rule.at_max_steps(10) is False and rule.reason(10) == "budget"
    assert StoppingRule("budget", None, BudgetClock(100.0, elapsed_before=100.0)).done(0) is True


def test_step_progress_and_max_steps():
    clock = BudgetClock(budget_seconds=100.0)
    rule = StoppingRule("steps", 8, clock)
    assert rule.fraction(2) == 0.25 and rule.done(7) is False
    assert rule.done(8) is True and rule.reason(8) == "max_steps"
    capped = StoppingRule("budget", 3, clock)  # a hard stop with budget progress too
    assert capped.done(3) is True and capped.reason(3) == "max_steps" and capped.fraction(3) == 0.0
