"""What a pretraining run is allowed to be, checked before any work: the train config, and the execution
settings (the GPU profile's defaults with `impl.*` overrides applied)."""

from dataclasses import dataclass

import torch
from omegaconf import OmegaConf

from cramming.errors import CrammingError
from cramming.hardware import GpuProfile, check_profile, known_profiles, resolve_auto, warn_if_mismatched
from cramming.runtime import Precision, check_lr_schedule
from cramming.train.wandb_logger import check_wandb_config


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
    profiles = known_profiles()
    chosen = OmegaConf.to_object(cfg.gpu)
    if chosen.name != "auto" and chosen.name not in profiles:
        raise CrammingError(f"gpu={chosen.name} is not a known profile")
    profile = resolve_auto(chosen, profiles)
    check_profile(profile)
    warn_if_mismatched(profile)
    impl = cfg.impl
    device = torch.device("cuda", local_rank) if profile.device == "cuda" else torch.device("cpu")
    precision = Precision.resolve(impl.precision or profile.precision, device, "impl.precision")
    if device.type == "cpu" and precision.name != "fp32":
        raise CrammingError(f"impl.precision={precision.name} is for GPUs; the cpu profile trains in fp32")
    if impl.microbatch_size is not None and impl.microbatch_size < 1:
        raise CrammingError(f"impl.microbatch_size={impl.microbatch_size} must be positive")
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


def check_train_config(cfg) -> None:
    train = cfg.train
    if not cfg.budget > 0:
        raise CrammingError(f"budget={cfg.budget} must be positive (GPU-hours)")
    if train.progress not in ("budget", "steps"):
        raise CrammingError(f"train.progress={train.progress!r} must be budget or steps")
    if train.progress == "steps" and not train.max_steps:
        raise CrammingError("train.progress=steps needs train.max_steps")
    if train.max_steps is not None and train.max_steps < 1:
        raise CrammingError(f"train.max_steps={train.max_steps} must be positive")
    if cfg.impl.deterministic and train.progress != "steps":
        raise CrammingError("impl.deterministic=true needs train.progress=steps (e.g. train=steps): a budget-driven "
                            "schedule follows the wall clock, which no two runs share")
    check_lr_schedule(train.lr_schedule)
    if train.batch_size < 1 or not 0 <= train.batch_ramp_fraction <= 1:
        raise CrammingError("train.batch_size must be positive and train.batch_ramp_fraction in [0, 1]")
    if cfg.checkpoint.interval_minutes <= 0 or cfg.checkpoint.keep_last < 0 or cfg.logging.every_steps < 1:
        raise CrammingError("checkpoint.interval_minutes > 0, checkpoint.keep_last >= 0, logging.every_steps >= 1")
    check_wandb_config(cfg.wandb)
