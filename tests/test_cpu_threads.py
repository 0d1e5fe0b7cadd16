"""On the CPU, pretrain.py sets torch's thread count from the cores the process may use, and prints it."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cramming.threads import cgroup_cpu_limit
from tests.train.runs import NO_PLOTS, NO_PROBE, TINY_DATA

REPO = Path(__file__).resolve().parents[1]


def quickstart(tmp_path: Path, prefix: list[str], **env: str) -> tuple[str, dict]:
    command = [*prefix, sys.executable, str(REPO / "pretrain.py"), "--config-name", "quickstart", NO_PROBE, NO_PLOTS,
               *TINY_DATA, "budget=0.0003", f"output_dir={tmp_path}"]  # the thread count is set before any of them
    environment = {key: value for key, value in os.environ.items() if key != "OMP_NUM_THREADS"}
    environment["CRAMMING_BUSY_CORES"] = "0"  # an idle machine, whatever this one is doing (tests/test_long_work.py)
    done = subprocess.run(command, cwd=tmp_path, env=environment | {"PYTHONPATH": str(REPO)} | env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    (summary,) = (tmp_path / "quickstart").glob("*/summary.json")
    return done.stdout + done.stderr, json.loads(summary.read_text())["provenance"]["device"]


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("taskset") is None or len(os.sched_getaffinity(0)) < 2,
                    reason="needs taskset, 2 cores")
def test_one_allowed_core_means_one_thread(tmp_path, shared_cache):
    console, device = quickstart(tmp_path, ["taskset", "-c", "0"])
    assert "cpu: 1 torch thread (1 usable core(s); OMP_NUM_THREADS=<n> sets it)" in console
    assert device["threads"] == 1


@pytest.mark.slow
def test_omp_num_threads_is_the_users_choice(tmp_path, shared_cache):
    console, device = quickstart(tmp_path, [], OMP_NUM_THREADS="1")
    assert "cpu: 1 torch thread (OMP_NUM_THREADS)" in console
    assert device["threads"] == 1


@pytest.mark.parametrize(("content", "cores"), [("200000 100000\n", 2), ("50000 100000\n", 1), ("max 100000\n", None),
                                                ("", None)])
def test_the_cgroup_quota_caps_the_cores(tmp_path, content, cores):
    path = tmp_path / "cpu.max"
    path.write_text(content)
    assert cgroup_cpu_limit(path) == cores
    assert cgroup_cpu_limit(tmp_path / "missing") is None
