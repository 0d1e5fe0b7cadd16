"""`eval_glue.py` as a user runs it: a real subprocess on a tiny checkpoint, and its one-line errors."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import GLUE_DIR

REPO = Path(__file__).resolve().parents[2]


def _eval_glue(*overrides: str, timeout: int = 300) -> subprocess.CompletedProcess:
    env = os.environ | {"PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    command = [sys.executable, str(REPO / "eval_glue.py"), *overrides]
    return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
def test_eval_glue_runs_one_task_on_a_tiny_checkpoint(rte_checkpoint, tmp_path):
    run = _eval_glue(
        f"ckpt={rte_checkpoint}",
        "eval.tasks=[rte]",
        f"eval.data_dir={GLUE_DIR}",
        "eval.max_train_examples=64",
        "eval.epochs=1",
        f"output_dir={tmp_path}",
    )
    assert run.returncode == 0, run.stderr
    console = run.stdout + run.stderr
    assert "rte seed 0 epoch 1/1: train loss" in console
    results = json.loads((tmp_path / "glue_results.json").read_text())
    assert 0.0 <= results["scores"]["rte"]["accuracy"] <= 100.0
    assert results["glue_score_over"] == ["rte"]
    assert results["tasks"]["rte"]["train_examples"] == 64
    assert results["tasks"]["rte"]["eval_examples"] == {"rte": 277}
    assert set(results["protocol_deviations"]) == {"epochs", "max_train_examples"}
    assert results["provenance"]["packages"]["torch"] and results["provenance"]["device"]["type"] in ("cpu", "cuda")
    assert results["checkpoint_provenance"] is None  # this checkpoint was saved without one (not by pretrain.py)
    report = (tmp_path / "glue_results.md").read_text()
    assert "| model | MNLI (m/mm) | SST-2 | STSB | RTE | QNLI | QQP | MRPC | CoLA | Average |" in report
    assert "- `max_train_examples`: 64 (protocol: None)" in report


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["ckpt=does/not/exist"], "error: ckpt=does/not/exist: no such directory"),
        (["eval.tasks=[rte,cola2]"], "error: unknown GLUE task 'cola2'; known tasks: cola, sst2, mrpc,"),
    ],
)
def test_bad_input_ends_in_one_line(rte_checkpoint, tmp_path, overrides, message):
    run = _eval_glue(f"ckpt={rte_checkpoint}", f"output_dir={tmp_path}", *overrides, timeout=120)
    assert run.returncode == 2
    assert "Traceback" not in run.stderr
    assert run.stderr.strip().splitlines()[-1].startswith(message)


def test_missing_checkpoint_argument_ends_in_one_line(tmp_path):
    run = _eval_glue(f"output_dir={tmp_path}", timeout=120)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert run.stderr.strip().splitlines()[-1] == "error: ckpt is required: add ckpt=... to the command"
