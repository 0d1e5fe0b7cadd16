"""GPU profiles: what a budget means on a given card (peak FLOP/s, precision, memory, defaults) and MFU; the
number formats a card computes in (DTYPES), by the names every setting uses."""

import copy
import functools
import math
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import torch
from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, OmegaConf

from cramming import CONFIG_DIR
from cramming.errors import CrammingError, require

log = logging.getLogger(__name__)

# The longest budget a run is planned for, in GPU-hours (about 114 years of one GPU): a clock, an ETA and an end
# time beyond it say nothing true, and a date past it may not exist (datetime ends in the year 9999).
MAX_BUDGET_HOURS = 1e6
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass
class GpuProfile:
    name: str = MISSING
    device: str = "cuda"  # cuda | cpu
    match: list[str] = field(default_factory=list)  # substrings of torch.cuda.get_device_name() for detection
    memory_gb: float = 0.0  # GiB the microbatch search may fill (the card's if less; 0: the card's)
    peak_tflops: Optional[float] = None  # dense tensor throughput at `precision`; None: unknown (no MFU)
    precision: str = "bf16"  # bf16 | fp16 (with loss scaling) | fp32
    microbatch_size: int = 128
    compile: bool = True
    num_workers: int = 2  # data-loader processes


ConfigStore.instance().store(group="gpu", name="schema", node=GpuProfile)


def check_profile(profile: GpuProfile) -> None:
    if profile.device not in ("cuda", "cpu"):
        raise CrammingError(f"gpu.device={profile.device!r} must be cuda or cpu")
    if profile.precision not in DTYPES:
        raise CrammingError(f"gpu.precision={profile.precision!r} must be one of {', '.join(DTYPES)}")
    if profile.microbatch_size < 1:
        raise CrammingError(f"gpu.microbatch_size={profile.microbatch_size} must be positive")
    if profile.device == "cuda" and not torch.cuda.is_available():
        raise CrammingError(f"gpu={profile.name} needs a CUDA GPU and none is available; use gpu=cpu or gpu=auto")
    if profile.precision == "bf16" and profile.device == "cuda" and not torch.cuda.is_bf16_supported():
        raise CrammingError(f"gpu={profile.name} asks for bf16, which {torch.cuda.get_device_name()} lacks")


def matching_profile(device_name: str, known: dict[str, GpuProfile]) -> GpuProfile | None:
    """The profile of the card `torch.cuda.get_device_name()` calls `device_name`: among the profiles with a
    `match` substring in the name, the one with the longest such substring (the most specific), so that an
    "NVIDIA H100 PCIe" is h100-pcie (756 TFLOP/s) and not h100 (the SXM's 989), whose `H100` it also holds."""
    name = device_name.lower()
    found = [(len(pattern), profile.name) for profile in known.values() for pattern in profile.match
             if pattern.lower() in name]
    return known[max(found)[1]] if found else None


def card_profile_name(device_name: str, known: dict[str, GpuProfile]) -> str:
    """The name gpu=auto gives the card called `device_name`: its profile's, or auto:<its name> for a card
    no profile matches."""
    matched = matching_profile(device_name, known)
    return matched.name if matched is not None else f"auto:{device_name}"


def resolve_auto(profile: GpuProfile, known: dict[str, GpuProfile]) -> GpuProfile:
    """For gpu=auto: the known profile of the detected card (matching_profile), or cpu without a GPU."""
    if profile.name != "auto":
        return profile
    if not torch.cuda.is_available():
        return known["cpu"]
    detected = torch.cuda.get_device_name()
    matched = matching_profile(detected, known)
    if matched is not None:
        return matched
    log.warning("no profile matches %s; using its reported memory and no peak FLOP/s (no MFU)", detected)
    return GpuProfile(
        name=f"auto:{detected}",
        memory_gb=round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1),
        precision="bf16" if torch.cuda.is_bf16_supported() else "fp16",
    )


def warn_if_mismatched(profile: GpuProfile) -> None:
    """Running a profile on another card is allowed (that is what budget scaling is for), but say so."""
    if profile.device != "cuda" or not profile.match:
        return
    detected = torch.cuda.get_device_name()
    card = matching_profile(detected, known_profiles())
    if card is None or card.name != profile.name:
        log.warning("gpu=%s is a profile for %s, but this is %s%s", profile.name, "/".join(profile.match), detected,
                    f" (gpu={card.name})" if card else "")


def model_flops_utilization(tokens_per_second: float, flops_per_token: float, peak_tflops: float | None):
    """Achieved model FLOP/s over the device's peak, or None where the peak is unknown."""
    if not peak_tflops:
        return None
    return tokens_per_second * flops_per_token / (peak_tflops * 1e12)


def known_profiles() -> dict[str, GpuProfile]:
    """Every profile in configs/gpu (except auto), checked against the schema. Read once while the files are
    unchanged (a run asks four times, at about 30 ms a read on a CPU); each caller gets its own copies."""
    files = tuple((path, path.stat().st_mtime_ns) for path in sorted((CONFIG_DIR / "gpu").glob("*.yaml")))
    return copy.deepcopy(_read_profiles(files))


@functools.lru_cache(maxsize=1)
def _read_profiles(files: tuple[tuple[Path, int], ...]) -> dict[str, GpuProfile]:
    profiles = {}
    for path, _ in files:
        settings = OmegaConf.load(path)
        settings.pop("defaults", None)
        if path.stem != "auto":
            profiles[path.stem] = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(GpuProfile), settings))
    return profiles


def check_budget(budget_hours: float) -> None:
    """A budget in GPU-hours a run can be planned for: positive, finite, at most MAX_BUDGET_HOURS."""
    require([(math.isfinite(budget_hours) and budget_hours > 0,
              f"budget={budget_hours} must be a positive number (GPU-hours)"),
             (not budget_hours > MAX_BUDGET_HOURS,
              f"budget={budget_hours:g} is more than a run can be planned for: at most {MAX_BUDGET_HOURS:g} GPU-hours "
              f"({MAX_BUDGET_HOURS / 24 / 365.25:.0f} years of one GPU)")])


def budget_seconds(budget_hours: float, scaling: str, profile: GpuProfile, device_profile: GpuProfile) -> float:
    """Wall-clock seconds of training for a budget in GPU-hours.

    scaling=peak runs for budget × profile peak / this device's peak: the same peak-FLOP budget as the
    chosen profile (e.g. a 2080 Ti day on an H100). An approximation: achieved and peak speed differ.
    """
    check_budget(budget_hours)
    if scaling == "none":
        return budget_hours * 3600
    if scaling != "peak":
        raise CrammingError(f"budget_scaling={scaling!r} must be none or peak")
    if not profile.peak_tflops or not device_profile.peak_tflops:
        raise CrammingError(
            f"budget_scaling=peak needs the peak FLOP/s of gpu={profile.name} and of this device "
            f"({device_profile.name}); at least one is unknown"
        )
    seconds = budget_hours * 3600 * profile.peak_tflops / device_profile.peak_tflops
    if not 0 < seconds <= MAX_BUDGET_HOURS * 3600:
        raise CrammingError(f"budget={budget_hours:g} with budget_scaling=peak gives {seconds / 3600:.3g} hours of "
                            f"training on {device_profile.name}: a run is planned for more than 0 and at most "
                            f"{MAX_BUDGET_HOURS:g}")
    log.info("budget_scaling=peak: %.2f h on %s (%.1f TFLOP/s) = %.2f h on %s (%.1f TFLOP/s)",
             budget_hours, profile.name, profile.peak_tflops, seconds / 3600, device_profile.name,
             device_profile.peak_tflops)
    return seconds
