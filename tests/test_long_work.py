"""Long work a user can watch: the progress lines of a run's validations and probe and of fine-tuning, a speed
figure that leaves out what is not training, an ETA with the validations still to come, the end's account of
where the time went, and a busy machine said at the start and in summary.json. The load and the clock are
injected (CRAMMING_BUSY_CORES, the simulated clock), so nothing here depends on the machine it runs on."""

import json
import logging
import re
from types import SimpleNamespace

import pytest
import torch

from cramming.train.reporting import MetricsLog, StepFacts
from cramming.threads import CpuShare, busy_cores, expected_share
from tests.commands import in_process
from tests.train.runs import NO_PLOTS, TINY_DATA


def facts(step: int, tokens: int, not_training_s: float, pauses_left_s: float | None = 0.0) -> StepFacts:
    return StepFacts(step=step, microbatches=step, tokens=tokens, elapsed=0.0, remaining=60.0, budget_fraction=0.5,
                     loss=5.0, lr=1e-3, batch_size=32, nonfinite=0, grad_norm=1.0, clipped_fraction=None,
                     telemetry={}, not_training_s=not_training_s, pauses_left_s=pauses_left_s)


def test_tokens_per_second_leave_out_validation_and_checkpoint_time_and_the_eta_says_what_it_holds(
        tmp_path, monkeypatch, caplog):
    """20 s between two records, 15 of them a validation and a checkpoint: 1,000 tokens in 5 s of training."""
    now = [100.0]
    monkeypatch.setattr("cramming.train.reporting.time.perf_counter", lambda: now[0])
    metrics = MetricsLog(tmp_path / "metrics.jsonl", None, 0, flops_per_token=1.0, peak_tflops=None)
    metrics.start()
    now[0] += 10.0
    assert metrics.record(facts(1, 1000, 0.0))["tokens_per_s"] == 100.0
    now[0] += 20.0
    with caplog.at_level(logging.INFO, logger="pretrain"):
        assert metrics.record(facts(2, 2000, 15.0, pauses_left_s=None))["tokens_per_s"] == 200.0
    assert re.search(r"\(ETA \d\d:\d\d \+ validations\)", caplog.messages[-1])  # none measured yet: not in the ETA


def test_the_expected_share_follows_the_scheduler():
    assert expected_share(2, 2, 0.0) == 1.0 and expected_share(2, 2, 2.0) == 0.5
    assert expected_share(1, 2, 2.0) == pytest.approx(1 / 3)
    share = CpuShare(threads=2, cores=2, busy_cores=2.0, expected_speed_share=0.5)
    assert share.notice() == ("the machine is busy (2.0 of 2 usable cores in use by other processes); this run gets "
                              "about 50% of the speed expected on an idle machine, and the budget clock charges wall "
                              "time all the same")
    assert CpuShare(threads=2, cores=2, busy_cores=0.1, expected_speed_share=0.95).notice() is None


@pytest.fixture
def torch_threads():
    """A command run in this process sets torch's thread count for the process: put it back after the test."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def test_a_run_on_a_busy_machine_says_so_shows_its_long_phases_and_where_its_time_went(
        shared_cache, tmp_path, simulated_clock, monkeypatch, torch_threads):
    """The quick start's shape with its probe, on a machine two other processes keep busy (injected): the warning
    at the start and in summary.json, the probe's progress lines (every one, EVERY_S 0), and the time line."""
    monkeypatch.setenv("CRAMMING_BUSY_CORES", "2")
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr("cramming.phase_progress.EVERY_S", 0.0)
    run = in_process("pretrain", "--config-name", "quickstart", *TINY_DATA, NO_PLOTS, "budget=0.0002",
                     "train.validation.blimp_pairs=2", "train.validation.bits_rows=2", f"output_dir={tmp_path}")
    output = run.stdout + run.stderr
    assert run.returncode == 0, output
    assert re.search(r"the machine is busy \(2\.0 of \d+ usable cores in use by other processes\); this run gets "
                     r"about \d+% of the speed expected on an idle machine, and the budget clock charges wall time "
                     r"all the same", output)
    assert re.search(r"zero-shot probe at the end: \d+% \([\d,]+ of [\d,]+ masked rows\)", output)
    assert re.search(r"time: .+ in all: training .+ \(the budget clock\), validation .+, set-up .+ \(data .+\), "
                     r"start, end and record .+; the machine was busy at the start \(2\.0 of \d+ cores", output)
    (summary,) = tmp_path.glob("quickstart/*/summary.json")
    machine = json.loads(summary.read_text())["machine"]
    assert machine["busy_cores"] == 2.0 and 0 < machine["expected_speed_share"] < 1


def test_the_busy_cores_are_read_from_proc_stat_over_the_look(tmp_path, monkeypatch):
    """Two CPUs, 100 jiffies each over the look, 150 of them busy (user, system; idle and iowait are not): 1.5."""
    monkeypatch.delenv("CRAMMING_BUSY_CORES")
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1})
    stat = tmp_path / "stat"
    states = [["cpu0 10 0 10 80 0 0 0 0", "cpu1 0 0 0 100 0 0 0 0"],
              ["cpu0 80 0 20 90 10 0 0 0", "cpu1 50 0 20 130 0 0 0 0"]]

    def the_next_state(seconds: float = 0.0) -> None:  # the look's wait: the CPUs' counters move on
        stat.write_text("cpu  0 0 0 0 0 0 0 0\n" + "\n".join(states.pop(0) if states else []) + "\n")

    monkeypatch.setattr("cramming.threads.time", SimpleNamespace(sleep=the_next_state))
    the_next_state()
    assert busy_cores(path=stat) == pytest.approx(1.5)
    assert busy_cores(path=tmp_path / "absent") is None
