"""Nothing lost, nothing silently wrong: a kill in the middle of a rewrite of a run's record, a step whose
gradients are not finite, and the setting a divergence is blamed on (the last two through pretrain's main()
in this process: tests/commands.py)."""

import signal
import subprocess
import sys

import pytest

from tests.commands import in_process
from tests.conftest import REPO_ROOT
from tests.train.runs import STEP_RUN, copy_run, only_run, records, summary
from tests.train.test_reliability import run_cli

KILL_INSIDE_WRITE = str(REPO_ROOT / "tests" / "kill_inside_write.py")


@pytest.mark.slow
def test_a_kill_while_a_resume_rewrites_the_metrics_loses_no_record(shared_cache, tmp_path, straight_run):
    """A resume rewrites metrics.jsonl without the records past its checkpoint; killed inside that rewrite,
    the run keeps every record (the old file or the new one, never an empty one)."""
    run = STEP_RUN + [f"output_dir={tmp_path}", "checkpoint.keep_last=8"]
    run_dir = copy_run(straight_run, tmp_path)  # the run above, trained once per test session
    written = records(run_dir)
    resume = f"resume={run_dir / 'checkpoints' / 'step-00000004'}"
    killed = subprocess.run([sys.executable, KILL_INSIDE_WRITE, "metrics.jsonl", str(REPO_ROOT / "pretrain.py"),
                             *run, resume], capture_output=True, text=True, timeout=600)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert records(run_dir) == written
    resumed = run_cli(*run, resume)
    assert resumed.returncode == 0, resumed.stderr
    assert [r["step"] for r in records(run_dir)] == list(range(1, 9))
    assert [r["loss"] for r in records(run_dir)] == [r["loss"] for r in written]
    assert summary(run_dir)["final_loss"] == written[-1]["loss"]


def test_a_step_with_non_finite_gradients_is_skipped_and_never_confirms_a_checkpoint(shared_cache, tmp_path):
    """lr 1e2: step 1 is finite and checkpointed, but its weights give a finite loss with NaN gradients. Those
    steps are skipped (the weights stay finite) and counted; step 1's checkpoint, never followed by an applied
    step, is removed: resuming it with a lower lr would only diverge again."""
    run = in_process("pretrain", *STEP_RUN, "train.max_steps=6", "train.max_nonfinite_steps=3", "train.optim.lr=1e2",
                     "train.check_nonfinite_every=1", f"output_dir={tmp_path}")  # read every step: stops at step 4
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert "step 2: non-finite gradient norm, step skipped (1 in a row)" in run.stdout + run.stderr
    assert run.stderr.strip().splitlines()[-1] == (
        "error: 3 non-finite steps in a row at step 4: the run diverged and stopped; no checkpoint was written "
        "before it diverged: start again with a lower train.optim.lr")
    run_dir = only_run(tmp_path)
    assert list((run_dir / "checkpoints").iterdir()) == []
    assert [r["step"] for r in records(run_dir)] == [1]  # the skipped steps have no loss to record
    assert summary(run_dir)["nonfinite_skipped"] == 3


def test_an_init_that_would_diverge_is_refused_before_training(tmp_path):
    """arch.init_std far above the recipe's trained to loss 75 (or diverged) with no word: refused at the start,
    where a lower lr could not have saved it."""
    run = in_process("pretrain", *STEP_RUN, "arch.init_std=2", f"output_dir={tmp_path}")
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert run.stderr.strip().splitlines()[-1] == (
        "error: arch.init_std must be positive and at most 0.2, got 2.0 (100x the recipe's 0.02: the first logits "
        "are so large that the loss starts near the tens and stays there)")
    assert "step 1" not in run.stdout + run.stderr and not any(tmp_path.iterdir())
