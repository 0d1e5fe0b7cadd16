"""The execution settings of a pretraining run: the GPU profile's defaults with `impl.*` overrides applied, and the
device they resolve to. (The config's values are checked by the config itself: cramming.train.config.)"""

from dataclasses import dataclass

import torch
from omegaconf import OmegaConf

from cramming.engine.device import resolve_device
from cramming.engine.precision import Precision
from cramming.errors import CrammingError
from cramming.engine.hardware import GpuProfile, check_profile, known_profiles, resolve_auto, warn_if_mismatched


@dataclass
class Settings:
    profile: GpuProfile
    device: torch.device
    microbatch_size: int | None  # None until chosen (impl.microbatch_size=null: see train.microbatch)
    precision: Precision
    compile: bool
    num_workers: int


def device_type(cfg) -> str:
    """cuda or cpu, as the chosen profile asks (before the profile is checked: torchrun needs it first)."""
    return "cuda" if torch.cuda.is_available() and OmegaConf.select(cfg, "gpu.device") == "cuda" else "cpu"


def resolve_settings(cfg, local_rank: int) -> Settings:
    """The profile's defaults with impl.* applied, after the config's checks."""
    profiles = known_profiles()
    chosen = OmegaConf.to_object(cfg.gpu)
    if chosen.name != "auto" and chosen.name not in profiles:
        raise CrammingError(f"gpu={chosen.name} is not a known profile")
    profile = resolve_auto(chosen, profiles)
    check_profile(profile)
    warn_if_mismatched(profile)
    impl = cfg.impl
    device = resolve_device(f"cuda:{local_rank}" if profile.device == "cuda" else "cpu", "gpu.device")
    precision = Precision.resolve(impl.precision or profile.precision, device, "impl.precision")
    if device.type == "cpu" and precision.name != "fp32":
        raise CrammingError(f"impl.precision={precision.name} is for GPUs; the cpu profile trains in fp32")
    return Settings(
        profile=profile,
        device=device,
        microbatch_size=impl.microbatch_size,
        precision=precision,
        compile=profile.compile if impl.compile is None else impl.compile,
        num_workers=profile.num_workers if impl.num_workers is None else impl.num_workers,
    )


def device_profile(settings: Settings) -> GpuProfile:
    """The profile of the device actually in use (for budget scaling)."""
    if settings.device.type == "cpu":
        return known_profiles()["cpu"]
    return resolve_auto(GpuProfile(name="auto"), known_profiles())


