"""Real runs of pretrain.py: the quick start, exact resume after SIGKILL, non-finite losses, DDP, bad config."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from safetensors.torch import load_file

from cramming.errors import CrammingError
from cramming.train import trainer as trainer_module
from cramming.train.config import PretrainConfig  # noqa: F401  (registers the schemas)
from tests.conftest import REPO_ROOT

TINY_RUN = [
    "data=embedded",
    "arch=crammed-bert-tiny",
    "gpu=cpu",
    "name=t",
]
# A step-driven run: same steps and data order every time, checkpoints after every step.
STEP_RUN = TINY_RUN + [
    "train=steps",
    "train.max_steps=8",
    "train.batch_size=64",
    "impl.microbatch_size=16",
    "budget=1",
    "logging.every_steps=1",
    "checkpoint.interval_minutes=1e-9",
]


def pretrain(*overrides: str, launcher=(sys.executable,), wait=True):
    command = [*launcher, str(REPO_ROOT / "pretrain.py"), *overrides]
    if not wait:
        return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return subprocess.run(command, capture_output=True, text=True, timeout=600, env=os.environ.copy())


def only_run(output_dir: Path) -> Path:
    (run_dir,) = (output_dir / "t").iterdir()
    return run_dir


def records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_budget_run_finishes_on_time_and_leaves_its_outputs(cache_dir, tmp_path):
    budget_hours = 0.002  # 7.2 s
    run = pretrain(*TINY_RUN, f"budget={budget_hours}", f"output_dir={tmp_path}", "logging.every_steps=1")
    assert run.returncode == 0, run.stderr
    run_dir = only_run(tmp_path)
    final = run_dir / "checkpoints" / "final"
    assert {"model.safetensors", "config.json", "tokenizer.json", "trainer_state.pt"} <= {p.name for p in final.iterdir()}
    assert (run_dir / "config.yaml").exists()
    state = torch.load(final / "trainer_state.pt", weights_only=True)
    elapsed, budget = state["progress"]["elapsed"], budget_hours * 3600
    lines = records(run_dir)
    longest_step = max(b["elapsed"] - a["elapsed"] for a, b in zip([{"elapsed": 0.0}] + lines, lines))
    assert budget <= elapsed <= budget + longest_step  # stops within one microbatch (<= one step) of the budget
    assert lines[-1]["step"] == state["progress"]["step"] and lines[-1]["tokens"] == state["progress"]["tokens"]
    assert {"step", "elapsed", "tokens", "loss", "lr", "batch_size", "tokens_per_s"} <= set(lines[-1])


def test_sigkill_and_resume_match_an_uninterrupted_run(cache_dir, tmp_path):
    straight = pretrain(*STEP_RUN, f"output_dir={tmp_path / 'a'}")
    assert straight.returncode == 0, straight.stderr

    victim = pretrain(*STEP_RUN, f"output_dir={tmp_path / 'b'}", wait=False)
    deadline = time.time() + 300
    while not list((tmp_path / "b").glob("t/*/checkpoints/step-00000003")):
        assert victim.poll() is None and time.time() < deadline, "the run ended before it could be killed"
        time.sleep(0.05)
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    resumed = pretrain(*STEP_RUN, f"output_dir={tmp_path / 'b'}", "resume=latest")
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming" in resumed.stdout

    a, b = only_run(tmp_path / "a"), only_run(tmp_path / "b")
    state_a = torch.load(a / "checkpoints/final/trainer_state.pt", weights_only=True)["progress"]
    state_b = torch.load(b / "checkpoints/final/trainer_state.pt", weights_only=True)["progress"]
    assert (state_a["step"], state_a["microbatches"], state_a["tokens"]) == (8, state_b["microbatches"], state_b["tokens"])
    assert state_b["step"] == 8
    weights_a, weights_b = load_file(a / "checkpoints/final/model.safetensors"), load_file(b / "checkpoints/final/model.safetensors")
    assert all(torch.equal(weights_a[key], weights_b[key]) for key in weights_a)
    steps_b = [record["step"] for record in records(b)]
    assert steps_b == list(range(1, 9))  # the curve continues: no gap, no repeated step
    assert [r["loss"] for r in records(a)] == [r["loss"] for r in records(b)]
    assert [r["microbatches"] for r in records(a)] == [r["microbatches"] for r in records(b)]


def compose_config(overrides: list[str]):
    with initialize_config_dir(config_dir=str(REPO_ROOT / "configs"), version_base="1.3"):
        return compose("pretrain", overrides=overrides)


def test_nonfinite_losses_are_skipped_then_stop_the_run(cache_dir, tmp_path, monkeypatch):
    original = trainer_module._Loop._accumulate
    calls = {"n": 0}

    def sometimes_nan(self, accumulate):
        loss, done = original(self, accumulate)
        calls["n"] += 1
        return (torch.tensor(float("nan")) if calls["n"] in (2, 3) or calls["n"] >= 6 else loss), done

    monkeypatch.setattr(trainer_module._Loop, "_accumulate", sometimes_nan)
    cfg = compose_config(STEP_RUN + [f"output_dir={tmp_path}", "train.max_steps=20", "train.max_nonfinite_steps=3"])
    with pytest.raises(CrammingError, match="3 non-finite losses in a row at step 8"):
        trainer_module.pretrain(cfg)
    run_dir = only_run(tmp_path)
    assert not (run_dir / "checkpoints" / "final").exists()
    last_good = torch.load(run_dir / "checkpoints/step-00000007/trainer_state.pt", weights_only=True)["progress"]
    assert last_good["nonfinite_total"] == 4 and last_good["step"] == 7  # steps 2, 3, 6, 7 skipped
    logged = records(run_dir)  # skipped steps have no loss to log
    assert [(r["step"], r["nonfinite_skipped"]) for r in logged] == [(1, 0), (4, 2), (5, 2)]


def test_two_processes_with_gloo(cache_dir, tmp_path):
    run = pretrain(*STEP_RUN, "train.max_steps=3", f"output_dir={tmp_path}",
                   launcher=(sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"))
    assert run.returncode == 0, run.stdout + run.stderr
    run_dir = only_run(tmp_path)  # rank 1 made no run directory of its own
    state = torch.load(run_dir / "checkpoints/final/trainer_state.pt", weights_only=True)
    assert state["fingerprint"]["world_size"] == 2 and state["progress"]["step"] == 3
    assert records(run_dir)[-1]["batch_size"] % 32 == 0  # two ranks of 16


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["train.bogus=1"], "bogus"),
        (["gpu=tpu"], "tpu"),
        (["budget=-1"], "error: budget=-1.0 must be positive"),
        (["train.lr_schedule=step"], "error: train.lr_schedule='step' is unknown"),
        (["resume=/nowhere"], "error: resume=/nowhere: not a checkpoint"),
    ],
)
def test_bad_config_is_one_clear_line(cache_dir, tmp_path, overrides, message):
    run = pretrain(*TINY_RUN, "budget=0.001", f"output_dir={tmp_path}", *overrides)
    assert run.returncode != 0 and message in run.stderr and "Traceback" not in run.stderr
