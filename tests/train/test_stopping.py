"""The stopping rule: progress by budget or by steps, max_steps as a hard stop, always a plain bool; and how
ranks agree on it without a host sync per step."""

import pytest
import torch

from cramming.train.distributed import Distributed
from cramming.train.stopping import BudgetClock, LocalAgreement, Progress, RankAgreement, StoppingRule, agreement


def test_budget_progress_without_max_steps_gives_plain_booleans():
    clock = BudgetClock(budget_seconds=100.0, elapsed_before=40.0)
    rule = StoppingRule("budget", None, clock)
    assert rule.fraction(10) == 0.4
    assert rule.done(10) is False  # a plain bool
    assert rule.at_max_steps(10) is False and rule.reason(10) == "budget"
    assert StoppingRule("budget", None, BudgetClock(100.0, elapsed_before=100.0)).done(0) is True


def test_step_progress_and_max_steps():
    clock = BudgetClock(budget_seconds=100.0)
    rule = StoppingRule("steps", 8, clock)
    assert rule.fraction(2) == 0.25 and rule.done(7) is False
    assert rule.done(8) is True and rule.reason(8) == "max_steps"
    capped = StoppingRule("budget", 3, clock)  # a hard stop with budget progress too
    assert capped.done(3) is True and capped.reason(3) == "max_steps" and capped.fraction(3) == 0.0


class TwinRank(Distributed):
    """Two ranks, the other one a twin of this one: a collective's maximum is this rank's value, unless the test
    gives the other rank's. The read schedule without processes; tests/train/test_torchrun.py runs the real
    collectives."""

    def __init__(self, progress: Progress):
        super().__init__(rank=0, world_size=2)
        self.progress, self.reads, self.others = progress, [], {}

    def max(self, value: torch.Tensor) -> torch.Tensor:
        self.reads.append(self.progress.step)
        other = self.others.get(self.progress.step)
        return value if other is None else torch.maximum(value, torch.tensor(other, dtype=value.dtype))


def run_agreed(dist: TwinRank, progress: Progress, budget_s: float = 100.0, accumulate: int = 2) -> RankAgreement:
    """Steps of `accumulate` microbatches of 0.5 s on a simulated clock, under the agreement, as the loop and
    the step ask it; every step checks that the extrapolated f is the clock's."""
    clock = BudgetClock(budget_s, 0.0, lambda: progress.microbatches * 0.5)
    clock.start()
    agreement = RankAgreement(StoppingRule("budget", None, clock), dist, 10, torch.device("cpu"), lambda f: accumulate)
    while not agreement.should_stop(progress):
        assert agreement.fraction(progress) == pytest.approx(clock.fraction)
        for microbatch in range(accumulate):
            if microbatch and agreement.budget_ran_out():
                break
            progress.microbatches += 1
        progress.step += 1
    return agreement


def test_ranks_read_every_few_steps_and_at_every_step_and_microbatch_near_the_end():
    progress = Progress()
    dist = TwinRank(progress)
    agreement = run_agreed(dist, progress)
    # Until the pace is known (the first step) as near the end: before the step and inside it, before its second
    # microbatch; then with the non-finite reads, every 10 steps; from 80 s on the budget may end before the next
    # read (2 x 10 steps x 1 s ahead): again before each step and inside it
    near_end = [read for step in range(80, 100) for read in (step, step)]
    assert dist.reads == [0, 0, 1, *range(10, 80, 10), *near_end, 100]
    assert progress.step == 100 and agreement.stopping.reason(progress.step) == "budget"


def test_a_signal_on_another_rank_stops_every_rank_at_the_next_read_as_interrupted():
    progress = Progress()
    dist = TwinRank(progress)
    dist.others[20] = [0.0, 15.0]  # the other rank got SIGTERM during step 14: it votes at the read before step 21
    agreement = run_agreed(dist, progress)
    assert progress.step == 20 and dist.reads == [0, 0, 1, 10, 20]
    assert agreement.stopping.interrupt.signum == 15 and agreement.stopping.reason(20) == "interrupted"


def test_the_slowest_ranks_clock_ends_the_budget_for_all():
    progress = Progress()
    dist = TwinRank(progress)
    dist.others[30] = [100.0, 0.0]  # the other rank's clock says the budget is spent
    run_agreed(dist, progress)
    assert progress.step == 30 and dist.reads[-1] == 30


def test_one_process_decides_alone_from_its_clock():
    clock = BudgetClock(budget_seconds=100.0, elapsed_before=40.0)
    stopping = StoppingRule("budget", None, clock)
    assert agreement(stopping, Distributed(), 10, torch.device("cpu"), lambda f: 1).__class__ is LocalAgreement
    local = LocalAgreement(stopping)
    assert local.fraction(Progress(step=3)) == 0.4 and not local.should_stop(Progress()) and not local.budget_ran_out()
