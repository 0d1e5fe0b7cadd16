"""scripts/calculator.py end to end: table, JSON, markdown and plot; fit and check at toy size; bad input."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from cramming.calculator.config import CalculatorConfig, CandidateGrid, FitGrid, check_config
from cramming.calculator.measure import local_device
from cramming.errors import CrammingError
from cramming.hardware import known_profiles
from cramming.model import ModelConfig

from .test_loss_model import write_run

REPO = Path(__file__).resolve().parents[2]
TOY = ("vocab_size=512", "candidates.depths=[1,2]", "candidates.widths=[64,128]", "fit_grid.depths=[1,2]",
       "fit_grid.widths=[64,128]", "fit_grid.batches=[2,4]", "fit_grid.steps=1")


def run(tmp_path, *overrides):
    command = [sys.executable, "scripts/calculator.py", f"output_dir={tmp_path / 'out'}", *overrides]
    # PYTHONPATH: this checkout's package (`python scripts/x.py` puts scripts/ first on sys.path; an editable
    # install may point at another checkout), as tests/conftest.py sets it for every other subprocess
    env = {"CRAMMING_CACHE": str(tmp_path / "cache"), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": str(REPO)}
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300, env=env)


def test_ranks_shapes_with_a_loss_fit_and_writes_outputs(tmp_path):
    for i, (layers, hidden) in enumerate([(1, 64), (2, 64), (2, 128), (4, 128)]):
        arch = ModelConfig(name="tiny", num_layers=layers, hidden_size=hidden, num_heads=4,
                           intermediate_size=4 * hidden)
        write_run(tmp_path / "runs" / f"r{i}" / "2026-01-01_00-00-00", arch, [8.0, 6.0 - 0.2 * i])
    result = run(tmp_path, "budget=24", "gpu=2080ti", f"runs={tmp_path}/runs/*/*/metrics.jsonl")
    assert result.returncode == 0, result.stderr
    report = json.loads((tmp_path / "out" / "2080ti-24h.json").read_text())
    assert report["budget_hours"] == 24 and report["microbatch_size"] == 128
    assert "V100" in report["speed"]["source"] and "V100" in result.stdout  # says it is not measured
    assert len(report["held_out"]) == 4 and "largest held-out error" in result.stdout
    candidates = report["candidates"]
    assert len(candidates) == 9 * 8 and candidates[0]["recommended"]
    assert sum(c["recommended"] for c in candidates) == 1
    assert [c["loss"] for c in candidates] == sorted(c["loss"] for c in candidates)
    assert "**recommended**" in (tmp_path / "out" / "2080ti-24h.md").read_text()
    assert (tmp_path / "out" / "2080ti-24h.png").stat().st_size > 10_000


def test_fit_then_check_on_this_machine(tmp_path):
    result = run(tmp_path, "budget=0.01", "gpu=cpu", "fit=true", "check=true", "check_seconds=1", *TOY)
    assert result.returncode == 0, result.stderr
    stored = json.loads((tmp_path / "cache" / "calculator" / "cpu.json").read_text())
    assert len(stored["points"]) == 8 and stored["fit_error"] >= 0
    assert "RMS error" in result.stdout and "check: predicted" in result.stdout
    report = json.loads((tmp_path / "out" / "cpu-0.01h.json").read_text())
    assert report["frontier"] is None and all(c["loss"] is None for c in report["candidates"])
    assert report["check"]["measured_tokens_per_s"] > 0 and report["check"]["predicted_tokens_per_s"] > 0
    assert report["speed"]["source"].startswith("measured on CPU")
    again = run(tmp_path, "budget=0.01", "gpu=cpu", *TOY)  # the stored constants are reused
    assert again.returncode == 0, again.stderr
    reused = json.loads((tmp_path / "out" / "cpu-0.01h.json").read_text())
    assert reused["speed"]["constants"] == stored["constants"]


def test_bad_input_is_one_line(tmp_path):
    result = run(tmp_path, "budget=-1")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == "error: budget=-1.0 must be positive (GPU-hours)"
    result = run(tmp_path, "gpu=nonexistent")
    assert result.returncode == 2
    assert result.stderr.startswith("error: unknown gpu=nonexistent; choose one of 2080ti, 3060ti, a100,")


@pytest.mark.parametrize("settings,message", [
    ({"check_seconds": 0}, "check_seconds=0 must be positive"),
    ({"fit_grid": FitGrid(widths=[])}, "fit_grid.widths=[] must be a non-empty list"),
    ({"candidates": CandidateGrid(widths=[100])}, "width 100 must be even and a multiple of head_size=64"),
    ({"loss_exponent": 1.5}, "loss_exponent=1.5 must be in (0, 1)"),
])
def test_bad_settings_are_rejected(settings, message):
    with pytest.raises(CrammingError, match=re.escape(message)):
        check_config(CalculatorConfig(gpu=known_profiles()["2080ti"], **settings))


def test_fit_and_check_need_the_profile_of_this_machine(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # the machine without a GPU, on any machine
    with pytest.raises(CrammingError, match="needs a CUDA GPU"):
        local_device(known_profiles()["a100"])
    assert local_device(known_profiles()["cpu"]) == "cpu"


def test_schema_rejects_unknown_keys_and_reads_the_gpu_group():
    from hydra import compose, initialize_config_dir
    from hydra.errors import ConfigCompositionException

    import cramming.calculator.config  # noqa: F401  (registers the schema)

    with initialize_config_dir(config_dir=str(REPO / "configs"), version_base="1.3"):
        cfg = compose("calculator", overrides=["budget=12", "gpu=a6000", "runs='outputs/*/*/metrics.jsonl'"])
        assert (cfg.budget, cfg.gpu.name, cfg.gpu.peak_tflops) == (12.0, "a6000", 154.8)
        assert cfg.runs == "outputs/*/*/metrics.jsonl"
        with pytest.raises(ConfigCompositionException):
            compose("calculator", overrides=["budgt=12"])
