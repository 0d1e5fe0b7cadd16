"""The budget clock: training wall time, carried across resumes; and the simulated time tests drive it with."""

import math
import subprocess
import sys
from types import SimpleNamespace

import pytest

from cramming.train.stopping import BudgetClock, time_source
from tests.conftest import REPO_ROOT
from tests.train.runs import TINY_RUN, only_run, summary


def test_clock_counts_from_start_and_carries_earlier_runs():
    now = [100.0]
    clock = BudgetClock(budget_seconds=60, elapsed_before=15, time_source=lambda: now[0])
    assert clock.elapsed == 15  # not started: only the earlier runs count
    clock.start()
    now[0] += 15
    assert clock.elapsed == 30 and clock.fraction == 0.5 and clock.remaining == 30 and not clock.expired()
    with clock.paused():  # measurement that is not training
        now[0] += 100
    assert clock.elapsed == 30 and clock.paused_on_clock == 100
    now[0] += 30
    assert clock.expired() and clock.fraction == 1.0 and clock.remaining == 0


def test_the_wall_clock_is_the_default(monkeypatch):
    monkeypatch.delenv("CRAMMING_SIMULATED_MICROBATCH_SECONDS", raising=False)
    import time

    assert time_source(SimpleNamespace(microbatches=0)) is time.perf_counter


def test_simulated_time_advances_with_the_microbatches_trained(monkeypatch):
    monkeypatch.setenv("CRAMMING_SIMULATED_MICROBATCH_SECONDS", "0.5")
    progress = SimpleNamespace(microbatches=10)  # a resumed run: its earlier time is in elapsed_before
    clock = BudgetClock(budget_seconds=8, elapsed_before=5, time_source=time_source(progress))
    clock.start()
    progress.microbatches += 4
    assert clock.elapsed == 7 and not clock.expired()
    progress.microbatches += 2
    assert clock.expired()


@pytest.mark.slow
def test_a_budget_run_on_simulated_time_buys_the_same_microbatches_on_any_machine(shared_cache, tmp_path,
                                                                                   simulated_clock):
    """The command line as a user runs it, with the environment variable the budget-clocked tests use: the
    3.6 s budget ends after exactly ceil(3.6 / 0.125) = 29 microbatches, however fast this machine is."""
    run = subprocess.run([sys.executable, str(REPO_ROOT / "pretrain.py"), *TINY_RUN, "budget=0.001",
                          "impl.microbatch_size=16", "train.batch_size=64", f"output_dir={tmp_path}"],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    facts = summary(only_run(tmp_path))
    assert facts["stop_reason"] == "budget"
    assert facts["microbatches"] == math.ceil(0.001 * 3600 / simulated_clock) == 29
