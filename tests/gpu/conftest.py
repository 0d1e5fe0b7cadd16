"""The GPU suite: every test here is marked `gpu` and skipped on a machine without CUDA (CI's), so the
same suite passes there and, run in full, on a GPU machine (`pytest -m gpu`, or gpu_check's tests stage).

Tests run the commands as a user does, as subprocesses on the GPU, with tiny models so the whole suite
fits in a few minutes; the embedded corpus means no data has to travel to the GPU machine. Those marked
`quick` are the GPU check's short selection (`pytest -m "gpu and quick"`, stage=quick): each command's
GPU path once, without the budget run and the options (the quick check's cram and bench cover those)."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.conftest import REPO_ROOT

TINY_GPU_RUN = ["data=embedded", "arch=crammed-bert-tiny", "gpu=auto", "name=t"]
# optimizer steps, not the clock: a few steps of each option, whatever the GPU's speed
STEPS = ["train=steps", "train.max_steps=6", "train.batch_size=64", "impl.microbatch_size=32", "budget=1",
         "logging.every_steps=1"]


def pytest_configure(config):
    config.addinivalue_line("markers", "quick: the GPU check's quick selection (stage=quick: about a minute)")


def pytest_collection_modifyitems(config, items):
    here = Path(__file__).parent
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if here in Path(item.fspath).parents:
            item.add_marker(pytest.mark.gpu)
            if not torch.cuda.is_available():
                item.add_marker(skip)


def run_script(script: str, *arguments: str, launcher=(sys.executable,), timeout: int = 300):
    """`python <script> arguments...` from the repository root, as a user runs it."""
    return subprocess.run([*launcher, str(REPO_ROOT / script), *arguments], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO_ROOT, env=os.environ.copy())


def the_run(output_dir: Path, name: str = "t") -> Path:
    (run_dir,) = (output_dir / name).iterdir()
    return run_dir


def losses(run_dir: Path) -> list[float]:
    return [json.loads(line)["loss"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def assert_a_budget_run(result: dict) -> None:
    """What a budget-clocked run shows however many steps fit. Compilation runs on the budget clock, and on
    cold caches it can take the whole budget: then one step fits, and there is no later step to measure the
    first one against (compile_s is None) nor a second validation point."""
    assert result["stop_reason"] == "budget" and result["budget_used_fraction"] == 1.0
    assert result["steps"] >= 1 and math.isfinite(result["final_loss"])
    if result["steps"] == 1:
        assert result["compile_s"] is None
    else:
        assert result["compile_s"] > 0
        assert result["validation"]["final_loss"] < result["validation"]["first_loss"]
