import dataclasses

import pytest
import torch

from cramming.errors import CrammingError
from cramming.engine.hardware import (GpuProfile, budget_seconds, check_profile, known_profiles, matching_profile,
                               model_flops_utilization, resolve_auto, warn_if_mismatched)

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


# torch.cuda.get_device_name() of each card -> its profile and dense bf16 (2080 Ti: fp16) peak. The H100s' are
# NVIDIA's datasheet figures with sparsity, halved; both A100s have the same datasheet peak.
CARDS = {
    "NVIDIA H100 80GB HBM3": ("h100", 989.0),  # the SXM card
    "NVIDIA H100 PCIe": ("h100-pcie", 756.0),
    "NVIDIA H100 NVL": ("h100-nvl", 835.0),
    "NVIDIA H200": ("h200", 989.0),
    "NVIDIA H200 NVL": ("h200-nvl", 835.0),
    "NVIDIA A100-SXM4-80GB": ("a100", 312.0),
    "NVIDIA A100 80GB PCIe": ("a100", 312.0),
    "NVIDIA A100-PCIE-40GB": ("a100", 312.0),
    "NVIDIA GeForce RTX 2080 Ti": ("2080ti", 53.8),
}


def one_card(monkeypatch, name: str) -> list:
    """torch.cuda as on a machine with this card; returns the devices get_device_name was asked about."""
    asked = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: asked.append(device) or name)
    return asked


@pytest.mark.parametrize("card", CARDS)
def test_auto_gives_the_exact_card_its_own_peak(monkeypatch, card):
    """An H100 PCIe holds "H100" too: it was scored as the SXM (989 TFLOP/s) before the longest match won."""
    asked = one_card(monkeypatch, card)
    profile = resolve_auto(GpuProfile(name="auto"), known_profiles())
    assert (profile.name, profile.peak_tflops) == CARDS[card]
    assert asked == [None]  # the current device: the one the run uses


def test_no_profile_is_shadowed_by_another():
    """Every profile's own names find that profile, whatever order the profiles are read in."""
    profiles = known_profiles()
    for order in (profiles, dict(reversed(profiles.items()))):
        for profile in profiles.values():
            for pattern in profile.match:
                assert matching_profile(f"NVIDIA {pattern}", order).name == profile.name
    assert matching_profile("NVIDIA B200", profiles) is None


def test_a_profile_run_on_another_card_names_the_cards_own(monkeypatch, caplog):
    one_card(monkeypatch, "NVIDIA H100 PCIe")
    warn_if_mismatched(known_profiles()["h100"])
    assert "gpu=h100 is a profile for H100, but this is NVIDIA H100 PCIe (gpu=h100-pcie)" in caplog.text
    caplog.clear()
    warn_if_mismatched(known_profiles()["h100-pcie"])
    assert caplog.text == ""


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
    slow = dataclasses.replace(profiles["h100"], name="slow", peak_tflops=1e-3)  # a profile's peak set by hand
    with pytest.raises(CrammingError, match=r"budget=1e\+06 with budget_scaling=peak gives 9.89e\+11 hours of "
                                            r"training on slow: a run is planned for more than 0 and at most 1e\+06"):
        budget_seconds(1e6, "peak", profiles["h100"], slow)


def test_mfu():
    assert model_flops_utilization(1e5, 1e9, 200.0) == pytest.approx(0.5)
    assert model_flops_utilization(1e5, 1e9, None) is None


def test_a_runs_mfu_is_measured_against_the_card_present_not_the_profile_chosen(monkeypatch):
    """gpu=2080ti (53.8 TFLOP/s) run on an H100 PCIe: its MFU must be against the H100 PCIe's 756, as the trainer
    asks device_profile for the peak (the chosen profile keeps setting precision, memory and defaults)."""
    from cramming.engine.precision import Precision
    from cramming.train.settings import Settings, device_profile

    one_card(monkeypatch, "NVIDIA H100 PCIe")
    chosen = known_profiles()["2080ti"]
    settings = Settings(chosen, torch.device("cuda", 0), 128, Precision("fp32", "cpu"), False, 0)
    assert (device_profile(settings).name, device_profile(settings).peak_tflops) == ("h100-pcie", 756.0)
