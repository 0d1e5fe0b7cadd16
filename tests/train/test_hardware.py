import pytest
import torch

from cramming.errors import CrammingError
from cramming.hardware import (
    GpuProfile,
    budget_seconds,
    check_profile,
    known_profiles,
    model_flops_utilization,
    resolve_auto,
)

REQUIRED = {"2080ti", "3060ti", "a4000", "a6000", "v100", "a100", "h100", "h200", "cpu"}


def test_every_required_profile_exists_and_is_consistent():
    profiles = known_profiles()
    assert REQUIRED <= set(profiles)
    assert profiles["2080ti"].precision == "fp16" and profiles["2080ti"].peak_tflops == 53.8  # Turing: no bf16
    assert profiles["h100"].precision == "bf16" and profiles["h100"].peak_tflops == 989.0
    assert profiles["cpu"].device == "cpu" and profiles["cpu"].peak_tflops is None
    for profile in profiles.values():
        assert profile.precision in ("bf16", "fp16", "fp32") and profile.microbatch_size > 0


@pytest.fixture
def no_gpu(monkeypatch):
    """The machine without a GPU, on any machine (CI's has none; a GPU machine runs this suite too)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


def test_auto_without_a_gpu_is_the_cpu_profile(no_gpu):
    profiles = known_profiles()
    assert resolve_auto(GpuProfile(name="auto"), profiles).name == "cpu"
    assert resolve_auto(profiles["a6000"], profiles).name == "a6000"  # only auto is resolved


def test_a_gpu_profile_without_a_gpu_is_a_clear_error(no_gpu):
    with pytest.raises(CrammingError, match="needs a CUDA GPU and none is available"):
        check_profile(known_profiles()["h100"])


def test_budget_scaling_by_peak():
    profiles = known_profiles()
    assert budget_seconds(24, "none", profiles["2080ti"], profiles["h100"]) == 24 * 3600
    scaled = budget_seconds(24, "peak", profiles["2080ti"], profiles["h100"])
    assert scaled == pytest.approx(24 * 3600 * 53.8 / 989.0)  # a 2080 Ti day is 1.3 h on an H100
    with pytest.raises(CrammingError, match="peak FLOP/s .* unknown"):
        budget_seconds(24, "peak", profiles["2080ti"], profiles["cpu"])
    with pytest.raises(CrammingError, match="budget_scaling='double'"):
        budget_seconds(24, "double", profiles["2080ti"], profiles["h100"])


def test_mfu():
    assert model_flops_utilization(1e5, 1e9, 200.0) == pytest.approx(0.5)
    assert model_flops_utilization(1e5, 1e9, None) is None
