"""Runs users can trust: torchrun killed and resumed (its default budget stop: test_torchrun.py), divergence that never
reaches a checkpoint, a tampered dataset cache, resuming into output_dir, crash time charged to the
budget, Ctrl-C and SIGTERM, a torn metrics line."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import psutil
import pytest
import torch
from omegaconf import OmegaConf
from safetensors.torch import load_file

from cramming.data import prepare as prepare_module
from cramming.data.prepare import prepare_dataset
from cramming.errors import CrammingError
from cramming.model.checkpoint import read_weights
from cramming.pretraining import pretrain
from cramming.train import resume
from cramming.train.callbacks import Callback
from cramming.train.signals import Interrupted
from tests.commands import in_process
from tests.conftest import REPO_ROOT
from tests.train.runs import STEP_RUN, InterruptAt, compose_config, copy_run, only_run, records, summary

TORCHRUN = (sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2")


# A run here takes seconds; one that has not ended after this long is stuck, and its output so far says where.
RUN_TIMEOUT_S = 300


def run_cli(*arguments: str, launcher=(sys.executable,), **popen) -> subprocess.CompletedProcess | subprocess.Popen:
    command = [*launcher, str(REPO_ROOT / "pretrain.py"), *arguments]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE if not popen else
                               subprocess.STDOUT, text=True, **popen)
    if popen:
        return process
    try:
        stdout, stderr = process.communicate(timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        kill_tree(process)  # the ranks too: torchrun starts each in a session of its own
        stdout, stderr = process.communicate()
        raise AssertionError(f"{' '.join(command)} did not end within {RUN_TIMEOUT_S} s; its output so far:\n"
                             f"{stdout}{stderr}") from None
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


def final_weights(run_dir: Path) -> dict[str, torch.Tensor]:
    return load_file(run_dir / "checkpoints" / "final" / "model.safetensors")


def kill_tree(process: subprocess.Popen) -> None:
    """SIGKILL a launcher and every process under it at once, as a crash of the machine would: torchrun
    starts each rank in a session of its own, so killing the launcher's process group misses them."""
    launcher = psutil.Process(process.pid)
    victims = [launcher, *launcher.children(recursive=True)]
    for victim in victims:
        victim.send_signal(signal.SIGKILL)
    psutil.wait_procs(victims, timeout=30)
    process.wait()


def wait_for(path_glob: str, root: Path, process: subprocess.Popen, timeout: float = 300) -> None:
    """Polls often: on a fast machine the moment lasts a few steps of a tiny model, tens of milliseconds."""
    deadline = time.time() + timeout
    while not list(root.glob(path_glob)):
        assert process.poll() is None and time.time() < deadline, "the run ended before the moment of the test"
        time.sleep(0.005)


@pytest.mark.slow
def test_torchrun_killed_and_resumed_matches_an_uninterrupted_run(shared_cache, tmp_path):
    straight = run_cli(*STEP_RUN, f"output_dir={tmp_path / 'a'}", launcher=TORCHRUN)
    assert straight.returncode == 0, straight.stdout + straight.stderr
    a = only_run(tmp_path / "a")  # two processes with gloo: rank 1 made no run directory of its own
    state = torch.load(a / "checkpoints/final/trainer_state.pt", weights_only=True)
    assert state["fingerprint"]["world_size"] == 2 and state["progress"]["step"] == 8
    assert records(a)[-1]["batch_size"] % 32 == 0  # two ranks of 16
    kept = "checkpoint.keep_last=8"  # step 3's checkpoint stays for the wait to see, however fast the steps
    victim = run_cli(*STEP_RUN, kept, f"output_dir={tmp_path / 'b'}", launcher=TORCHRUN, start_new_session=True)
    wait_for("t/*/checkpoints/step-00000003", tmp_path / "b", victim)
    kill_tree(victim)
    resumed = run_cli(*STEP_RUN, kept, f"output_dir={tmp_path / 'b'}", "resume=latest", launcher=TORCHRUN)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    b = only_run(tmp_path / "b")
    assert [r["step"] for r in records(b)] == list(range(1, 9))
    assert [r["loss"] for r in records(a)] == [r["loss"] for r in records(b)]
    weights_a, weights_b = final_weights(a), final_weights(b)
    assert all(torch.equal(weights_a[key], weights_b[key]) for key in weights_a)


@pytest.mark.slow
def test_a_diverging_run_exits_non_zero_and_leaves_no_bad_checkpoint(shared_cache, tmp_path):
    """A learning rate of 1e30 overflows the logits after the first update: every loss after it is
    non-finite. The checkpoint of step 1 (whose weights led there) is removed, none is written after."""
    run = in_process("pretrain", *STEP_RUN, "train.max_steps=20", "train.optim.lr=1e30", f"output_dir={tmp_path}")
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert run.stderr.strip().splitlines()[-1] == (
        "error: 10 non-finite steps in a row at step 11: the run diverged and stopped; no checkpoint was written "
        "before it diverged: start again with a lower train.optim.lr")
    run_dir = only_run(tmp_path)
    assert list((run_dir / "checkpoints").iterdir()) == []
    assert summary(run_dir)["stop_reason"] == "non-finite"


class PoisonWeightsAt(Callback):
    """Makes one weight NaN in the update of the given step, as a diverging update would."""

    def __init__(self, step: int):
        self.step = step

    def after_optimizer_step(self, state):
        if state.progress.step + 1 == self.step:
            with torch.no_grad():
                state.model.bert.embeddings.word_embeddings.weight[7, 0] = float("nan")


@pytest.mark.slow
def test_the_last_good_checkpoint_survives_pruning_and_resumes_with_a_lower_lr(shared_cache, tmp_path):
    cfg = STEP_RUN + [f"output_dir={tmp_path}", "train.max_steps=12", "train.max_nonfinite_steps=3",
                      "checkpoint.keep_last=1"]
    with pytest.raises(CrammingError) as stopped:
        pretrain(compose_config(cfg), callbacks=[PoisonWeightsAt(6)])
    run_dir = only_run(tmp_path)
    # step 6's loss on step 5's weights was finite, but its update left NaN weights: step 5 is not confirmed
    good = run_dir / "checkpoints" / "step-00000004"
    assert f"the last good checkpoint is {good}" in str(stopped.value)
    assert str(stopped.value).startswith("3 non-finite steps in a row at step 9")
    on_disk = sorted((run_dir / "checkpoints").iterdir())
    assert good in on_disk and all(read_weights(checkpoint) for checkpoint in on_disk)  # each one finite
    resumed = pretrain(compose_config(cfg + [f"resume={good}", "train.optim.lr=5e-4"]))
    assert resumed == run_dir and summary(run_dir)["stop_reason"] == "max_steps"
    assert all(torch.isfinite(weight).all() for weight in final_weights(run_dir).values())


def test_a_tampered_dataset_cache_is_rebuilt(tmp_path, caplog):
    data = OmegaConf.to_object(compose_config(STEP_RUN).data)
    dataset, _ = prepare_dataset(data, str(tmp_path))
    recorded = dict(dataset.meta["sha256"])
    rows = dataset.path / "rows.bin"
    flipped = bytearray(rows.read_bytes())
    flipped[100] ^= 0xFF  # same size, other content: only the hash can tell
    rows.write_bytes(bytes(flipped))
    prepare_module.VERIFIED.clear()  # as in a new process, which checks hashes on its first reuse
    rebuilt, reused = prepare_dataset(data, str(tmp_path))
    assert not reused and "rows.bin does not match the SHA-256 recorded when it was prepared" in caplog.text
    assert rebuilt.meta["sha256"] == recorded  # the same dataset again (preparation is deterministic)
    tokenizer = rebuilt.path / "tokenizer.json"
    tokenizer.write_text(tokenizer.read_text()[:100])  # truncated: sizes are checked at every open
    again, reused = prepare_dataset(data, str(tmp_path))
    assert not reused and "tokenizer.json has 100 bytes, expected" in caplog.text
    assert again.meta["sha256"] == recorded and np.array_equal(again.rows(), dataset.rows())


def test_resuming_a_checkpoint_from_elsewhere_writes_into_output_dir(shared_cache, tmp_path, straight_run):
    first = straight_run  # STEP_RUN's eight steps, every checkpoint kept
    checkpoint = first / "checkpoints" / "step-00000004"
    mine = pretrain(compose_config(STEP_RUN + [f"output_dir={tmp_path / 'mine'}", "train.max_steps=8",
                                               "checkpoint.keep_last=8", f"resume={checkpoint}"]))
    assert mine.parent == tmp_path / "mine" / "t"
    assert [r["step"] for r in records(mine)] == list(range(1, 9))  # the records up to the checkpoint came along
    assert [r["loss"] for r in records(mine)] == [r["loss"] for r in records(first)]
    assert (first / "checkpoints" / "final").is_dir() and len(list((first / "checkpoints").iterdir())) == 9


def test_a_heartbeat_is_written_while_training(shared_cache, tmp_path, monkeypatch):
    monkeypatch.setattr(resume, "HEARTBEAT_INTERVAL_S", 0.0)  # a heartbeat after every step
    with pytest.raises(KeyboardInterrupt):  # dies before step 6, long before its first checkpoint
        pretrain(compose_config(STEP_RUN + [f"output_dir={tmp_path}", "checkpoint.interval_minutes=100"]),
                 callbacks=[InterruptAt(6)])
    run_dir = only_run(tmp_path)
    beat = json.loads((run_dir / "heartbeat.json").read_text())
    assert beat["step"] == 5 and 0 < beat["elapsed"] <= summary(run_dir)["training_s"]  # after step 5, the last
    assert not list((run_dir / "checkpoints").glob("*"))


def test_heartbeat_time_beyond_the_checkpoint_is_charged(shared_cache, tmp_path, straight_run):
    run_dir = copy_run(straight_run, tmp_path)  # STEP_RUN's eight steps, every checkpoint kept
    checkpoint = run_dir / "checkpoints" / "step-00000004"
    at_checkpoint = torch.load(checkpoint / "trainer_state.pt", weights_only=True)["progress"]["elapsed"]
    (run_dir / "heartbeat.json").write_text(json.dumps({"elapsed": at_checkpoint + 30.0, "step": 6}))  # killed later
    pretrain(compose_config(STEP_RUN + [f"output_dir={tmp_path}", "train.max_steps=8", "checkpoint.keep_last=8",
                                        f"resume={checkpoint}"]))
    facts = summary(run_dir)
    assert facts["lost_to_crashes_s"] == pytest.approx(30.0, abs=1e-3)
    assert facts["training_s"] > at_checkpoint + 30.0


def test_a_torn_last_metrics_line_is_dropped_on_resume(shared_cache, tmp_path, caplog, straight_run):
    run_dir = copy_run(straight_run, tmp_path)  # STEP_RUN, every checkpoint kept
    with open(run_dir / "metrics.jsonl", "a") as handle:
        handle.write('{"step": 9, "loss": 1.2')  # killed mid-write
    pretrain(compose_config(STEP_RUN + [f"output_dir={tmp_path}", "checkpoint.keep_last=8",
                                        f"resume={run_dir / 'checkpoints' / 'step-00000006'}"]))
    assert "dropped its torn last line" in caplog.text
    assert [r["step"] for r in records(run_dir)] == list(range(1, 9))


SIGNALLED_STEPS = 20
SIGNALLED_RUN = [*STEP_RUN, f"train.max_steps={SIGNALLED_STEPS}", "checkpoint.interval_minutes=100"]


@pytest.mark.slow
def test_sigterm_stops_after_the_step_with_a_checkpoint_and_the_run_resumes_exactly(shared_cache, tmp_path):
    """SIGTERM (a scheduler's preemption) to the CLI; Ctrl-C takes the same path (next test)."""
    arguments, signum = SIGNALLED_RUN, signal.SIGTERM
    straight = pretrain(compose_config(SIGNALLED_RUN + [f"output_dir={tmp_path / 'a'}"]))
    victim = run_cli(*arguments, f"output_dir={tmp_path / 'b'}", start_new_session=True)
    wait_for("t/*/metrics.jsonl", tmp_path / "b", victim)  # step 1 is done; 19 steps and a validation to go
    victim.send_signal(signum)
    output, _ = victim.communicate(timeout=120)
    assert victim.returncode == 128 + signum and "Traceback" not in output
    run_dir = only_run(tmp_path / "b")
    step = summary(run_dir)["steps"]
    assert 0 < step < SIGNALLED_STEPS and summary(run_dir)["stop_reason"] == "interrupted"
    assert output.strip().splitlines()[-1] == (
        f"interrupted: stopped at step {step}; checkpoint {run_dir / 'checkpoints' / f'step-{step:08d}'}; to go on, "
        f"run the same command with resume={run_dir}")
    resumed = in_process("pretrain", *arguments, f"output_dir={tmp_path / 'b'}", f"resume={run_dir}")
    assert resumed.returncode == 0, resumed.stderr
    weights_a, weights_b = final_weights(straight), final_weights(run_dir)
    assert all(torch.equal(weights_a[key], weights_b[key]) for key in weights_a)


class SignalAt(Callback):
    """Sends this process a signal during the given step (1-based), as Ctrl-C in its terminal would."""

    def __init__(self, step: int, signum: int):
        self.step, self.signum = step, signum

    def before_step(self, state):
        if state.progress.step + 1 == self.step:
            os.kill(os.getpid(), self.signum)


def test_ctrl_c_stops_after_the_step_with_a_checkpoint(shared_cache, tmp_path):
    before = signal.getsignal(signal.SIGINT)  # Python's default, or SIG_IGN when started in the background
    with pytest.raises(Interrupted) as stopped:
        pretrain(compose_config(SIGNALLED_RUN + [f"output_dir={tmp_path}"]), callbacks=[SignalAt(3, signal.SIGINT)])
    run_dir = only_run(tmp_path)
    assert stopped.value.exit_code == 130 and summary(run_dir)["stop_reason"] == "interrupted"
    assert str(stopped.value) == (f"stopped at step 3; checkpoint {run_dir / 'checkpoints' / 'step-00000003'}; "
                                  f"to go on, run the same command with resume={run_dir}")
    assert signal.getsignal(signal.SIGINT) is before  # the handler is given back, whatever it was


@pytest.mark.slow
def test_a_second_signal_exits_at_once(shared_cache, tmp_path):
    """Steps of 32 microbatches (about a second here) and no checkpoint between them: the first SIGINT lands in a
    step, and the second is sent once the run has said it got the first, while it waits for the step to end.
    (Two signals sent at once would arrive as one; with a checkpoint after every step, the first could land
    after a step, so that the run stops before the second comes, on a busy machine.)"""
    victim = run_cli(*STEP_RUN, "train.max_steps=400", "train.batch_size=512", "train.batch_ramp_fraction=0",
                     "checkpoint.interval_minutes=100", f"output_dir={tmp_path}", start_new_session=True)
    wait_for("t/*/metrics.jsonl", tmp_path, victim)
    victim.send_signal(signal.SIGINT)
    lines = []
    while not lines or not lines[-1].startswith("SIGINT: stopping after this step"):
        lines.append(victim.stdout.readline())
        assert lines[-1], "".join(lines)  # the run ended before it said it got the signal
    victim.send_signal(signal.SIGINT)
    output, _ = victim.communicate(timeout=120)
    assert victim.returncode == 130 and "Traceback" not in "".join(lines) + output
    assert output.strip().splitlines()[-1] == "interrupted: second SIGINT: exiting now, without a checkpoint"
