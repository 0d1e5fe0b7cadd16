"""Real runs of pretrain.py: the quick start, exact resume after SIGKILL, non-finite losses, interruption,
bad config; and what a run leaves behind (summary.json, plots, W&B offline run). DDP under torchrun:
test_reliability.py."""

import json
import os
import platform
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from matplotlib.image import imread
from safetensors.torch import load_file

import cramming
from cramming.cli.groups import replaced_choices
from cramming.errors import CrammingError
from cramming.train.callbacks import Callback
from cramming.pretraining import pretrain as pretrain_in_process
from tests.commands import in_process
from tests.conftest import REPO_ROOT
from tests.train.runs import NO_PROBE, STEP_RUN, TINY_RUN, InterruptAt, compose_config, only_run, records, summary


def pretrain(*overrides: str, launcher=(sys.executable,), wait=True):
    command = [*launcher, str(REPO_ROOT / "pretrain.py"), *overrides]
    if not wait:
        return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return subprocess.run(command, capture_output=True, text=True, timeout=600, env=os.environ.copy())


@pytest.mark.slow
def test_budget_run_finishes_on_time_and_leaves_its_outputs(shared_cache, tmp_path, simulated_clock):
    budget_hours = 0.001  # 3.6 s: 29 microbatches of simulated time
    run = in_process("pretrain", *TINY_RUN, f"budget={budget_hours}", f"output_dir={tmp_path}", "logging.every_steps=1")
    assert run.returncode == 0, run.stderr
    run_dir = only_run(tmp_path)
    final = run_dir / "checkpoints" / "final"
    assert ({"model.safetensors", "config.json", "tokenizer.json", "trainer_state.pt"}
            <= {p.name for p in final.iterdir()})
    assert (run_dir / "config.yaml").exists()
    assert [line.partition("   #")[0] for line in run.stdout.splitlines() if line.startswith("next: ")] == [
        f"next: python eval_glue.py ckpt={final}", f"next: python scripts/export.py ckpt={final} out=exported/t-"
        f"{run_dir.name}"]  # what to run after it, as commands to copy
    state = torch.load(final / "trainer_state.pt", weights_only=True)
    elapsed, budget = state["progress"]["elapsed"], budget_hours * 3600
    lines = records(run_dir)
    longest_step = max(b["elapsed"] - a["elapsed"] for a, b in zip([{"elapsed": 0.0}] + lines, lines))
    assert budget <= elapsed <= budget + longest_step  # stops within one microbatch (<= one step) of the budget
    assert lines[-1]["step"] == state["progress"]["step"] and lines[-1]["tokens"] == state["progress"]["tokens"]
    assert {"step", "elapsed", "tokens", "loss", "lr", "batch_size", "tokens_per_s"} <= set(lines[-1])


@pytest.mark.slow
def test_sigkill_and_resume_match_an_uninterrupted_run(shared_cache, tmp_path, straight_run):
    kept = "checkpoint.keep_last=8"  # step 3's checkpoint stays for the wait to see, however fast the steps
    victim = pretrain(*STEP_RUN, kept, f"output_dir={tmp_path / 'b'}", wait=False)
    deadline = time.time() + 300
    while not list((tmp_path / "b").glob("t/*/checkpoints/step-00000003")):
        assert victim.poll() is None and time.time() < deadline, "the run ended before it could be killed"
        time.sleep(0.005)
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    resumed = in_process("pretrain", *STEP_RUN, kept, f"output_dir={tmp_path / 'b'}", "resume=latest")
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming" in resumed.stdout

    a, b = straight_run, only_run(tmp_path / "b")  # a: the same STEP_RUN, uninterrupted (tests/train/conftest.py)
    state_a = torch.load(a / "checkpoints/final/trainer_state.pt", weights_only=True)["progress"]
    state_b = torch.load(b / "checkpoints/final/trainer_state.pt", weights_only=True)["progress"]
    assert ((state_a["step"], state_a["microbatches"], state_a["tokens"])
            == (8, state_b["microbatches"], state_b["tokens"]))
    assert state_b["step"] == 8
    weights_a, weights_b = (load_file(a / "checkpoints/final/model.safetensors"),
                            load_file(b / "checkpoints/final/model.safetensors"))
    assert all(torch.equal(weights_a[key], weights_b[key]) for key in weights_a)
    optimizer_a, optimizer_b = (torch.load(run / "checkpoints/final/trainer_state.pt", weights_only=True)["optimizer"]
                                for run in (a, b))
    assert optimizer_a["state"].keys() == optimizer_b["state"].keys() and len(optimizer_a["state"]) > 10
    for key, moments in optimizer_a["state"].items():  # AdamW's step count and both moments, bit for bit
        assert all(torch.equal(value, optimizer_b["state"][key][name]) for name, value in moments.items())
    steps_b = [record["step"] for record in records(b)]
    assert steps_b == list(range(1, 9))  # the curve continues: no gap, no repeated step
    assert [r["loss"] for r in records(a)] == [r["loss"] for r in records(b)]
    assert [r["microbatches"] for r in records(a)] == [r["microbatches"] for r in records(b)]
    assert summary(a)["stop_reason"] == summary(b)["stop_reason"] == "max_steps"
    assert summary(b)["tokens"] == summary(a)["tokens"] and summary(b)["steps"] == 8


def png_size(path: Path) -> tuple[int, int]:
    height, width = imread(path).shape[:2]
    return width, height


@pytest.mark.slow
def test_quickstart_leaves_summary_plots_and_a_wandb_run_and_two_runs_overlay(shared_cache, tmp_path, simulated_clock):
    budget_hours = 0.001  # 3.6 s
    run = pretrain("--config-name", "quickstart", "wandb=offline", f"budget={budget_hours}",
                   f"output_dir={tmp_path}", "logging.every_steps=1")
    assert run.returncode == 0, run.stderr
    (run_dir,) = (tmp_path / "quickstart").iterdir()
    lines, facts = records(run_dir), summary(run_dir)
    assert facts["stop_reason"] == "budget" and facts["microbatch_size"] == 32  # null: the cpu profile's
    assert facts["microbatch_source"] == "cpu profile"
    assert (facts["steps"], facts["tokens"], facts["microbatches"]) == (
        lines[-1]["step"], lines[-1]["tokens"], lines[-1]["microbatches"])
    assert facts["final_loss"] == lines[-1]["loss"]
    assert min(r["loss"] for r in lines) <= facts["smoothed_loss"] <= max(r["loss"] for r in lines)
    assert facts["training_s"] >= budget_hours * 3600 and facts["budget_used_fraction"] == 1.0
    assert facts["mean_tokens_per_s"] == pytest.approx(facts["tokens"] / facts["training_s"], rel=1e-3)
    assert facts["peak_memory_gb"] > 0.05  # outside_training_s: the wall less simulated time, either sign
    outside = facts["outside_training"]  # its parts: set-up (data and the search in it), validations, the end
    assert outside["validation_s"] == facts["validation"]["seconds"] > 0
    assert 0 < outside["data_s"] + outside["microbatch_search_s"] <= outside["setup_s"]
    assert outside["after_training_s"] >= 0  # the loop's start and end: either sign on a simulated clock
    parts = ("setup_s", "validation_s", "loop_start_and_end_s", "after_training_s")
    assert sum(outside[part] for part in parts) == pytest.approx(facts["outside_training_s"], abs=0.005)
    assert facts["mean_mfu"] is None and facts["energy_wh"] is None  # the cpu: no peak FLOP/s, no NVML
    made_by = facts["provenance"]  # what produced the run, also in every checkpoint's config.json
    assert made_by["cramming"] == cramming.__version__ and made_by["python"] == platform.python_version()
    assert made_by["packages"]["torch"] == torch.__version__ and made_by["packages"]["transformers"]
    assert made_by["git_commit"] is None or len(made_by["git_commit"]) == 40
    assert made_by["device"]["type"] == "cpu" and made_by["device"]["name"]
    assert made_by["dataset"].startswith("embedded-") and len(made_by["config_sha256"]) == 64
    assert json.loads((run_dir / "checkpoints/final/config.json").read_text())["provenance"] == made_by
    assert all(r["cpu_util"] >= 0 and r["rss_gb"] > 0 for r in lines)  # telemetry rides along in each record
    # the validation curve: the held-out rows at 25/50/75% of the budget and at the end, in the records too
    curve = facts["validation"]["curve"]
    assert facts["validation"]["held_out_rows"] == 226  # the embedded corpus' 904 rows: capped at a quarter
    assert [point["step"] for point in curve] == [r["step"] for r in lines if "val_loss" in r]
    assert len(curve) == 4 and curve[-1]["budget_fraction"] == 1.0
    fraction_before = {b["step"]: a["elapsed"] / facts["budget_wall_s"] for a, b in zip(lines, lines[1:])}
    for f, point in zip((0.25, 0.5, 0.75), curve):  # at the first step that ends past f
        assert fraction_before[point["step"]] < f <= point["budget_fraction"], (f, point)
    assert facts["validation"]["first_loss"] > facts["validation"]["final_loss"]  # the model is learning
    assert 0 < facts["validation"]["final_accuracy"] < 1 and facts["validation"]["seconds"] > 0
    # the zero-shot probe, on by default at the quick start's size (10 BLiMP pairs a paradigm, 8 rows)
    assert all(0 <= point["blimp"] <= 100 and point["bits_per_char"] > 0 for point in curve)
    assert "BLiMP on 10 pairs of each of 67 paradigms" in run.stdout + run.stderr
    assert all(r["grad_norm"] > 0 and 0 <= r["clipped_fraction"] <= 1 for r in lines)  # every logging step
    shares = facts["time_shares"]  # after the first step: inside the step, waiting for data, around it
    assert shares["step"] + shares["data"] + shares["around"] == pytest.approx(1, abs=1e-3)
    assert set(shares) == {"step", "data", "around", "seconds"}  # their values: test_summary.py (no speed here)
    panels = {"loss": 2, "schedules": 2, "gradients": 2, "throughput": 1, "hardware": 2,  # no MFU panel: no peak
              "zero_shot": 4}  # BLiMP and bits per character, against tokens and time: two rows
    assert {path.stem: png_size(path) for path in (run_dir / "plots").glob("*.png")} == {
        name: (550 * min(count, 2), 400 * ((count + 1) // 2)) for name, count in panels.items()}
    (records_file,) = (run_dir / "wandb").glob("offline-run-*/*.wandb")  # ready for `wandb sync`
    logged = records_file.read_bytes()  # protobuf records: their keys and JSON values are plain text
    for expected in (b"batch_ramp_fraction", b"tokens_per_s", b"cpu_util", b"val_loss", b"grad_norm",
                     b"summary/final_loss",
                     b"summary/stop_reason", json.dumps(facts["final_loss"]).encode()):
        assert expected in logged, expected  # the config, the metrics, the summary

    other = pretrain_in_process(compose_config(STEP_RUN + ["train.max_steps=3", f"output_dir={tmp_path}"]))
    overlay = tmp_path / "compare.png"
    command = [sys.executable, str(REPO_ROOT / "scripts/plot_runs.py"), str(run_dir), str(other), "--out", str(overlay)]
    plotted = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert plotted.returncode == 0, plotted.stderr
    assert png_size(overlay) == (1100, 1200)  # the loss, and the quick start's BLiMP and bits per character
    by_default = in_process("plot_runs", str(run_dir), str(other), cwd=tmp_path)  # under outputs/, not here
    (written,) = (tmp_path / "outputs" / "comparisons").glob("*-loss.png")
    assert by_default.stdout == f"wrote {written.relative_to(tmp_path)}\n" and png_size(written) == (1100, 1200)
    not_a_run = in_process("plot_runs", str(tmp_path))
    assert not_a_run.returncode == 2 and "no metrics.jsonl" in not_a_run.stderr and "Traceback" not in not_a_run.stderr


class PoisonedLoss(Callback):
    """Turns the loss of the given steps (1-based) into NaN, as a diverging run would."""

    def __init__(self, steps):
        self.steps = steps

    def after_forward(self, state, batch, loss, output):
        return loss * float("nan") if self.steps(state.progress.step + 1) else loss


def test_nonfinite_losses_are_skipped_then_stop_the_run(shared_cache, tmp_path):
    # counts read every step: the run stops at the step that reaches the limit (tests/train/test_step_syncs.py
    # runs the default, a read every 10 steps)
    cfg = compose_config(STEP_RUN + [f"output_dir={tmp_path}", "train.max_steps=20", "train.max_nonfinite_steps=3",
                                     "train.check_nonfinite_every=1", "logging.plots=true"])
    with pytest.raises(CrammingError) as stopped:
        pretrain_in_process(cfg, callbacks=[PoisonedLoss(lambda step: step in (2, 3) or step >= 6)])
    run_dir = only_run(tmp_path)
    good = run_dir / "checkpoints" / "step-00000004"
    assert str(stopped.value).startswith("3 non-finite steps in a row at step 8: the run diverged and stopped; "
                                         f"the last good checkpoint is {good}; to go on from it")
    # a checkpoint counts once a step on its weights had a finite loss: step 4's did (step 5); step 5's did not
    # (step 6), so it is removed; none is written while losses are non-finite
    assert sorted(path.name for path in (run_dir / "checkpoints").iterdir()) == ["step-00000004"]
    last_good = torch.load(good / "trainer_state.pt", weights_only=True)["progress"]
    assert last_good["nonfinite_total"] == 2 and last_good["step"] == 4  # steps 2 and 3 skipped
    logged = records(run_dir)  # skipped steps have no loss to log
    assert [(r["step"], r["nonfinite_skipped"]) for r in logged] == [(1, 0), (4, 2), (5, 2)]
    facts = summary(run_dir)  # written before the error propagated
    assert facts["stop_reason"] == "non-finite" and facts["steps"] == 7 and facts["nonfinite_skipped"] == 5
    assert facts["final_loss"] == logged[-1]["loss"] and facts["tokens"] > logged[-1]["tokens"]
    assert (run_dir / "plots" / "loss.png").exists()


def test_an_interrupted_run_leaves_its_summary(shared_cache, tmp_path):
    with pytest.raises(KeyboardInterrupt):
        pretrain_in_process(compose_config(STEP_RUN + [f"output_dir={tmp_path}"]), callbacks=[InterruptAt(3)])
    run_dir = only_run(tmp_path)
    facts = summary(run_dir)
    assert facts["stop_reason"] == "interrupted" and facts["steps"] == 2
    assert facts["tokens"] == records(run_dir)[-1]["tokens"] and facts["final_loss"] == records(run_dir)[-1]["loss"]
    assert not (run_dir / "plots").exists()  # logging.plots=false (TINY_RUN's): the record without the drawing


def test_a_resumed_run_keeps_its_checkpoints_microbatch(shared_cache, tmp_path):
    cfg = STEP_RUN + [f"output_dir={tmp_path}", "train.max_steps=2"]
    pretrain_in_process(compose_config(cfg))
    run_dir = pretrain_in_process(compose_config(cfg + ["impl.microbatch_size=null", "resume=latest"]))
    facts = summary(run_dir)
    assert (facts["microbatch_size"], facts["microbatch_source"]) == (16, "checkpoint")  # not the profile's 32


@pytest.mark.parametrize(
    ("overrides", "message", "real"),
    [  # one case as a real subprocess, the others through the same main() in this process (tests/commands.py)
        (["train.bogus=1"], "bogus", True),
        (["gpu=tpu"], "tpu", False),
        (["budget=-1"], "error: budget=-1.0 must be a positive number", False),
        (["train.lr_schedule=step"], "error: train.lr_schedule='step' is unknown", False),
        (["resume=/nowhere"], "error: resume=/nowhere: no such directory", False),
        (["wandb.mode=cloud"], "error: wandb.mode='cloud' must be one of disabled, offline, online", False),
    ],
)
def test_bad_config_is_one_clear_line(shared_cache, tmp_path, overrides, message, real):
    arguments = (*TINY_RUN, "budget=0.001", f"output_dir={tmp_path}", *overrides)
    run = pretrain(*arguments) if real else in_process("pretrain", *arguments)
    assert run.returncode != 0 and message in run.stderr and "Traceback" not in run.stderr


def test_wandb_online_without_an_account_is_one_line_before_the_data(cache_dir, tmp_path):
    env = {key: value for key, value in os.environ.items() if not key.startswith("WANDB_")}
    env["HOME"] = str(tmp_path)  # no ~/.netrc, so no stored W&B key
    env["MPLCONFIGDIR"] = str(tmp_path / "matplotlib")  # a new HOME: no font cache to build and talk about
    run = subprocess.run(
        [sys.executable, str(REPO_ROOT / "pretrain.py"), *TINY_RUN, "budget=0.0002", f"output_dir={tmp_path}",
         "wandb=online"],
        capture_output=True, text=True, timeout=300, env=env,
    )
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert run.stderr.startswith("error: wandb=online: no W&B API key (no WANDB_API_KEY, no api.wandb.ai entry in "
                                 "~/.netrc): run `wandb login` first")
    assert not (tmp_path / "t").exists() and not cache_dir.exists()  # before the data and any run folder


@pytest.mark.slow
def test_a_group_choice_over_the_quickstarts_own_is_shown_and_a_last_step_validation_is_the_end(shared_cache,
                                                                                                 tmp_path):
    """`--config-name quickstart train=steps` silently brought back the recipe's 8192-sequence batch ramp in place
    of quick's 256; and a validation due at 75% that ran at the last step was labelled "75% of training"."""
    run = pretrain("--config-name", "quickstart", NO_PROBE, "train=steps", "train.max_steps=3", "train.batch_size=64",
                   "impl.microbatch_size=16", f"output_dir={tmp_path}")
    assert run.returncode == 0 and "Traceback" not in run.stderr, run.stderr
    console = run.stdout + run.stderr
    assert ("train=steps replaces quickstart's train=quick: train.progress budget -> steps; to keep train=quick, "
            "set keys instead (e.g. train.progress=steps)") in console  # the keys given (batch_size) not named
    labels = [line.split(" (step")[0] for line in console.splitlines() if line.startswith("validation at")]
    assert labels == ["validation at 33% of training", "validation at 67% of training", "validation at the end"]
    assert replaced_choices("quickstart", ["train=steps", "train.max_steps=3"]) == [
        "train=steps replaces quickstart's train=quick: train.progress budget -> steps, train.batch_size 256 -> "
        "8192; to keep train=quick, set keys instead (e.g. train.progress=steps)"]
    assert replaced_choices("quickstart", ["train=quick"]) == replaced_choices("pretrain", ["train=steps"]) == []
