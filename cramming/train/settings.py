"""What a pretraining run is allowed to be, checked before any work: the train config, and the execution
settings (the GPU profile's defaults with `impl.*` overrides applied)."""

import math
from dataclasses import dataclass

import torch
from omegaconf import OmegaConf

from cramming.errors import CrammingError
from cramming.hardware import GpuProfile, check_profile, known_profiles, resolve_auto, warn_if_mismatched
from cramming.data.checks import check_data_config
from cramming.model.config import as_model_config
from cramming.runtime import Precision, check_lr_schedule, resolve_device
from cramming.train.techniques import check_techniques
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
    """The profile's defaults with impl.* applied, after check_train_config."""
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


def check_train_config(cfg) -> None:
    """Every value in its domain, before any data is prepared: one line naming the first that is not."""
    train, optim, impl, validation = cfg.train, cfg.train.optim, cfg.impl, cfg.train.validation
    arch = as_model_config(cfg.arch)
    check_data_config(OmegaConf.to_object(cfg.data) if OmegaConf.is_config(cfg.data) else cfg.data)
    masked = round(train.mlm_rate * cfg.data.seq_length)
    rules = [
        (math.isfinite(cfg.budget) and cfg.budget > 0, f"budget={cfg.budget} must be a positive number (GPU-hours)"),
        (train.progress in ("budget", "steps"), f"train.progress={train.progress!r} must be budget or steps"),
        (train.progress != "steps" or train.max_steps, "train.progress=steps needs train.max_steps"),
        (train.max_steps is None or train.max_steps >= 1, f"train.max_steps={train.max_steps} must be positive"),
        (not impl.deterministic or train.progress == "steps",
         "impl.deterministic=true needs train.progress=steps (e.g. train=steps): a budget-driven schedule follows "
         "the wall clock, which no two runs share"),
        (math.isfinite(optim.lr) and optim.lr > 0, f"train.optim.lr={optim.lr} must be positive and finite"),
        # betas, eps and momentum are null where the optimizer does not read them (cramming.train.optimizers)
        (optim.betas is None or (len(optim.betas) == 2 and all(0 <= beta < 1 for beta in optim.betas)),
         f"train.optim.betas={list(optim.betas or [])} must be two numbers in [0, 1)"),
        (optim.eps is None or optim.eps > 0, f"train.optim.eps={optim.eps} must be positive"),
        (optim.momentum is None or 0 <= optim.momentum < 1, f"train.optim.momentum={optim.momentum} must be in [0, 1)"),
        (optim.gamma is None or optim.gamma > 0, f"train.optim.gamma={optim.gamma} must be positive"),
        (optim.hessian_every is None or optim.hessian_every >= 1,
         f"train.optim.hessian_every={optim.hessian_every} must be at least 1"),
        (optim.weight_decay >= 0, f"train.optim.weight_decay={optim.weight_decay} must not be negative"),
        (optim.grad_clip is None or optim.grad_clip > 0, f"train.optim.grad_clip={optim.grad_clip} must be positive "
         "(or null: no clipping)"),
        (0 < train.mlm_rate < 1 and 1 <= masked < cfg.data.seq_length,
         f"train.mlm_rate={train.mlm_rate} must mask 1 to {cfg.data.seq_length - 1} of {cfg.data.seq_length} tokens"),
        (0 <= train.warmup_fraction < 1, f"train.warmup_fraction={train.warmup_fraction} must be in [0, 1)"),
        (train.batch_size >= 1, f"train.batch_size={train.batch_size} must be at least 1"),
        (0 <= train.batch_ramp_fraction <= 1, f"train.batch_ramp_fraction={train.batch_ramp_fraction} must be in [0, 1]"),
        (train.max_nonfinite_steps >= 1, f"train.max_nonfinite_steps={train.max_nonfinite_steps} must be at least 1"),
        (train.check_nonfinite_every >= 1,
         f"train.check_nonfinite_every={train.check_nonfinite_every} must be at least 1"),
        (impl.microbatch_size is None or impl.microbatch_size >= 1,
         f"impl.microbatch_size={impl.microbatch_size} must be positive (or null: automatic)"),
        (impl.num_workers is None or impl.num_workers >= 0, f"impl.num_workers={impl.num_workers} must not be negative"),
        (cfg.data.seq_length <= arch.max_position_embeddings,
         f"data.seq_length={cfg.data.seq_length} exceeds arch.max_position_embeddings={arch.max_position_embeddings}"),
        (math.isfinite(cfg.checkpoint.interval_minutes) and cfg.checkpoint.interval_minutes > 0,
         f"checkpoint.interval_minutes={cfg.checkpoint.interval_minutes} must be positive"),
        (cfg.checkpoint.keep_last >= 0, f"checkpoint.keep_last={cfg.checkpoint.keep_last} must not be negative"),
        (all(0 <= f < 1 for f in cfg.checkpoint.keep_at),
         f"checkpoint.keep_at={list(cfg.checkpoint.keep_at)} must hold progress fractions in [0, 1)"),
        (cfg.logging.every_steps >= 1, f"logging.every_steps={cfg.logging.every_steps} must be at least 1"),
        (0 < cfg.logging.every_fraction <= 1,
         f"logging.every_fraction={cfg.logging.every_fraction} must be in (0, 1]"),
        (cfg.logging.progress in ("auto", "bar", "lines"),
         f"logging.progress={cfg.logging.progress!r} must be auto, bar or lines"),
        (all(0 < f < 1 for f in validation.fractions),
         f"train.validation.fractions={list(validation.fractions)} must each be in (0, 1) (the end is always validated)"),
        ((validation.early_stop_fraction is None) == (validation.early_stop_loss is None),
         "train.validation.early_stop_fraction and train.validation.early_stop_loss go together: set both or neither"),
        (validation.early_stop_fraction is None or validation.early_stop_fraction in validation.fractions,
         f"train.validation.early_stop_fraction={validation.early_stop_fraction} must be one of "
         f"train.validation.fractions={list(validation.fractions)} (the check runs at a validation)"),
        (validation.early_stop_loss is None or (math.isfinite(validation.early_stop_loss) and validation.early_stop_loss > 0),
         f"train.validation.early_stop_loss={validation.early_stop_loss} must be positive and finite"),
        (validation.early_stop_fraction is None or cfg.data.validation_rows > 0,
         "train.validation.early_stop_* needs a validation slice: data.validation_rows is 0"),
    ]
    for ok, problem in rules:
        if not ok:
            raise CrammingError(problem)
    check_lr_schedule(train.lr_schedule)
    check_techniques(cfg)
    check_wandb_config(cfg.wandb)
