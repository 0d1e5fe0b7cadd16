"""scripts/gpu_check.py: on a machine without CUDA it refuses in one line; its stages are wired end to end
(benchmark, pretraining, GLUE on that checkpoint) as a CPU dry run with a tiny model."""

import json
import os
import subprocess
import sys

from cramming.bench.gpu_check import GpuCheckConfig, run_gpu_check
from tests.conftest import REPO_ROOT, SHARED_DATA


def test_without_cuda_it_refuses_in_one_line(tmp_path):
    run = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "gpu_check.py"), f"output_dir={tmp_path}"],
                         capture_output=True, text=True, timeout=120, env=os.environ | {"CUDA_VISIBLE_DEVICES": ""})
    assert run.returncode == 2 and "Traceback" not in run.stdout + run.stderr
    assert run.stderr.strip().splitlines()[-1].startswith(
        "error: gpu_check needs a CUDA GPU (torch.cuda.is_available() is False here)")


def test_the_stages_run_end_to_end_as_a_cpu_dry_run(tmp_path):
    glue = SHARED_DATA / "glue"
    cfg = GpuCheckConfig(stage="all", device="cpu", output_dir=str(tmp_path), cram_minutes=0.06,
                         glue_dir=str(glue) if glue.is_dir() else None)
    results = run_gpu_check(cfg)
    assert list(results) == ["bench", "cram", "glue"]
    for stage in results:
        assert json.loads((tmp_path / f"{stage}.json").read_text())["device"] == "cpu (dry run)"
        assert (tmp_path / f"{stage}.md").read_text().startswith(f"### gpu_check stage={stage} on cpu (dry run)")
    assert results["bench"]["eager"]["ratio"] > 0 and "| eager |" in (tmp_path / "bench.md").read_text()
    assert "compiled" not in results["bench"]  # compiling is for the GPU run
    cram = results["cram"]["summary"]
    assert cram["stop_reason"] == "budget" and cram["validation"]["final_loss"] > 0
    if glue.is_dir():
        assert set(results["glue"]["seconds_per_task"]) == {"rte", "mrpc", "stsb"}
        assert "| rte | accuracy " in (tmp_path / "glue.md").read_text()
