"""Nothing lost, nothing silently wrong: a kill in the middle of a rewrite of a run's record, a step whose
gradients are not finite, and the setting a divergence is blamed on."""

import signal
import subprocess
import sys

from cramming.train.trainer import pretrain
from tests.conftest import REPO_ROOT
from tests.train.runs import STEP_RUN, compose_config, only_run, records, summary
from tests.train.test_reliability import run_cli

KILL_INSIDE_WRITE = str(REPO_ROOT / "tests" / "kill_inside_write.py")


def test_a_kill_while_a_resume_rewrites_the_metrics_loses_no_record(cache_dir, tmp_path):
    """A resume rewrites metrics.jsonl without the records past its checkpoint; killed inside that rewrite,
    the run keeps every record (the old file or the new one, never an empty one)."""
    run = STEP_RUN + [f"output_dir={tmp_path}", "checkpoint.keep_last=8"]
    run_dir = pretrain(compose_config(run))
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
