"""scripts/gpu_check.py: on a machine without CUDA it refuses in one line; its stages are wired end to end
(benchmark, pretraining, GLUE on that checkpoint) as a CPU dry run with a tiny model."""

import json
import os
import subprocess
import sys
from unittest import mock

import pytest

from cramming.bench.gpu_check import STAGES, GpuCheckConfig, run_gpu_check
from cramming.bench.gpu_suite import read_junit
from cramming.errors import CrammingError
from tests.conftest import REPO_ROOT, SHARED_DATA


def test_without_cuda_it_refuses_in_one_line(tmp_path):
    run = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "gpu_check.py"), f"output_dir={tmp_path}"],
                         capture_output=True, text=True, timeout=120, env=os.environ | {"CUDA_VISIBLE_DEVICES": ""})
    assert run.returncode == 2 and "Traceback" not in run.stdout + run.stderr
    assert run.stderr.strip().splitlines()[-1].startswith(
        "error: gpu_check needs a CUDA GPU (torch.cuda.is_available() is False here)")


def test_every_stage_runs_through_the_command_line_as_a_cpu_dry_run(tmp_path):
    """`python scripts/gpu_check.py stage=all device=cpu` as a user types it: the GPU suite (skipped here),
    the benchmark, pretraining and GLUE on its checkpoint, composed inside gpu_check's own Hydra app
    (this raised `GlobalHydra is already initialized` before), and one report of all four."""
    glue = SHARED_DATA / "glue"
    arguments = ["stage=all", "device=cpu", f"output_dir={tmp_path}", "cram_minutes=0.06",
                 *([f"glue_dir={glue}"] if glue.is_dir() else [])]
    run = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "gpu_check.py"), *arguments],
                         capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    assert "Traceback" not in run.stdout + run.stderr
    results = {stage: json.loads((tmp_path / f"{stage}.json").read_text()) for stage in STAGES}
    assert all(result["device"] == "cpu (dry run)" for result in results.values())
    tests = results["tests"]
    assert tests["ran"] and tests["tests"] > 0 and tests["skipped"] == tests["tests"] and not tests["failed"]
    assert results["bench"]["eager"]["ratio"] > 0 and "compiled" not in results["bench"]  # compiling is for GPUs
    cram = results["cram"]["summary"]
    assert cram["stop_reason"] == "budget" and cram["validation"]["final_loss"] > 0
    report = (tmp_path / "report.md").read_text()
    assert report.startswith("## GPU check (") and "torchao" in report
    assert [line.split(" on ")[0] for line in report.splitlines() if line.startswith("### ")] == [
        f"### gpu_check stage={stage}" for stage in STAGES]
    assert f"0 passed, 0 failed, {tests['tests']} skipped" in report and "| eager |" in report
    if glue.is_dir():
        assert set(results["glue"]["seconds_per_task"]) == {"rte", "mrpc", "stsb"}
        assert "| rte | accuracy " in report


def test_a_failed_gpu_test_fails_the_check_after_the_report(tmp_path):
    from cramming.bench import gpu_check

    junit = tmp_path / "suite.xml"
    junit.write_text('<testsuites><testsuite tests="3" skipped="0" time="1.5">'
                     '<testcase classname="tests.gpu.test_x" name="test_a"/>'
                     '<testcase classname="tests.gpu.test_x" name="test_b"><failure message="boom"/></testcase>'
                     '<testcase classname="tests.gpu.test_x" name="test_c"/></testsuite></testsuites>')
    result = {**read_junit(junit), "ran": True, "exit_code": 1}
    cfg = GpuCheckConfig(stage="tests", device="cpu", output_dir=str(tmp_path / "out"))
    with mock.patch.object(gpu_check, "_tests", lambda cfg, out: dict(result)), \
            pytest.raises(CrammingError, match=r"1 GPU test\(s\) failed \(tests.gpu.test_x::test_b\)"):
        run_gpu_check(cfg)
    assert "2 passed, 1 failed, 0 skipped" in (tmp_path / "out" / "report.md").read_text()
