"""`pretrain.py ... eval=glue`: the GLUE stage runs on the final checkpoint, after (and outside) the budget."""

import json
import subprocess
import sys

import pytest
import torch

from tests.conftest import REPO_ROOT

from .conftest import GLUE_DIR
from tests.train.runs import NO_PROBE


@pytest.mark.slow
def test_pretraining_run_ends_with_a_glue_report(shared_cache, tmp_path, simulated_clock):
    if not GLUE_DIR.exists():
        pytest.skip(f"GLUE data not found at {GLUE_DIR}")
    run = subprocess.run(
        [sys.executable, str(REPO_ROOT / "pretrain.py"), "--config-name", "quickstart", NO_PROBE, "budget=0.001",
         f"output_dir={tmp_path}", "eval=glue", "eval.tasks=[rte]", f"eval.data_dir={GLUE_DIR}",
         "eval.max_train_examples=32", "eval.epochs=1", "wandb=offline"],
        capture_output=True, text=True, timeout=600,
    )
    assert run.returncode == 0, run.stderr
    (run_dir,) = (tmp_path / "quickstart").iterdir()
    results = json.loads((run_dir / "glue" / "glue_results.json").read_text())
    assert results["checkpoint"] == str(run_dir / "checkpoints" / "final")
    assert results["glue_score_over"] == ["rte"] and 0.0 <= results["scores"]["rte"]["accuracy"] <= 100.0
    elapsed = torch.load(run_dir / "checkpoints/final/trainer_state.pt", weights_only=True)["progress"]["elapsed"]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["glue_score"] == results["glue_score"] and summary["stop_reason"] == "budget"
    assert results["checkpoint_provenance"] == summary["provenance"]  # GLUE results know what pretrained
    (records_file,) = (run_dir / "wandb").glob("offline-run-*/*.wandb")
    assert b"glue/score" in records_file.read_bytes() and b"glue/rte/accuracy" in records_file.read_bytes()
    assert elapsed < 3.6 + 5.0  # the 3.6 s budget (plus at most one step); the GLUE stage is not on the clock
