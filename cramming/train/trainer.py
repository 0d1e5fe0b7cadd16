"""The budget-clocked pretraining loop.

Composes the pieces: data stream, model, optimizer, schedules, clock, checkpoints, metrics, telemetry,
W&B, summary and plots. The loop itself is plain code: pick the batch size and lr for the current
progress, accumulate microbatches, step, log, checkpoint, stop at the budget.
"""

import contextlib
import dataclasses
import json
import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from omegaconf import OmegaConf

from cramming.data.prepare import prepare_dataset
from cramming.data.store import PreparedDataset
from cramming.data.tokenizer import as_transformers_tokenizer, load_tokenizer
from cramming.errors import CrammingError
from cramming.hardware import (
    GpuProfile,
    budget_seconds,
    check_profile,
    known_profiles,
    resolve_auto,
    warn_if_mismatched,
)
from cramming.model import build_mlm_model, training_flops_per_token
from cramming.model.checkpoint import read_weights
from cramming.train import checkpoint as ckpt
from cramming.train.clock import BudgetClock
from cramming.train.data import Microbatches, microbatch_stream
from cramming.train.distributed import Distributed
from cramming.train.metrics import MetricsLog, format_duration
from cramming.train.microbatch import MEMORY_MARGIN, cache_key, cached_search, cuda_step, search_microbatch
from cramming.train.optimizer import build_optimizer
from cramming.train.plots import plot_run
from cramming.train.schedules import accumulation_steps, lr_multiplier
from cramming.train.summary import build_summary, peak_memory_gb, read_records, write_summary
from cramming.train.telemetry import TelemetrySampler
from cramming.train.wandb_logger import WandbLogger, check_wandb_config

log = logging.getLogger("pretrain")
RESUME_MUST_MATCH = ("arch", "data", "train")
TIMED_FIRST_STEPS = 5  # steps whose durations estimate the compile time


class NonFiniteLossError(CrammingError):
    """Too many non-finite losses in a row: the run stops (after writing its summary)."""


@dataclass
class Progress:
    """Everything about where training stands; saved in every checkpoint."""

    step: int = 0  # optimizer steps taken
    microbatches: int = 0  # global microbatches consumed: the position in the data stream
    tokens: int = 0
    elapsed: float = 0.0  # training seconds, earlier runs of a resumed training included
    nonfinite_total: int = 0
    nonfinite_in_a_row: int = 0


@dataclass
class Settings:
    """The effective execution settings: the GPU profile's defaults with `impl.*` overrides applied."""

    profile: GpuProfile
    device: torch.device
    microbatch_size: int | None  # None until chosen by _choose_microbatch (impl.microbatch_size=null)
    precision: str
    compile: bool
    num_workers: int


def resolve_settings(cfg, dist_local_rank: int) -> Settings:
    profiles = known_profiles()
    chosen = OmegaConf.to_object(cfg.gpu)
    if chosen.name != "auto" and chosen.name not in profiles:
        raise CrammingError(f"gpu={chosen.name} is not a known profile")
    profile = resolve_auto(chosen, profiles)
    check_profile(profile)
    warn_if_mismatched(profile)
    impl = cfg.impl
    precision = impl.precision if impl.precision is not None else profile.precision
    if precision not in ("bf16", "fp16", "fp32"):
        raise CrammingError(f"impl.precision={precision!r} must be bf16, fp16 or fp32")
    if profile.device == "cpu" and precision != "fp32":
        raise CrammingError(f"impl.precision={precision} is for GPUs; the cpu profile trains in fp32")
    microbatch = impl.microbatch_size
    if microbatch is not None and microbatch < 1:
        raise CrammingError(f"impl.microbatch_size={microbatch} must be positive")
    device = torch.device("cuda", dist_local_rank) if profile.device == "cuda" else torch.device("cpu")
    return Settings(
        profile=profile,
        device=device,
        microbatch_size=microbatch,
        precision=precision,
        compile=profile.compile if impl.compile is None else impl.compile,
        num_workers=profile.num_workers if impl.num_workers is None else impl.num_workers,
    )


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
    lr_multiplier(train.lr_schedule, 0.5, train.warmup_fraction)  # rejects unknown schedules
    if train.batch_size < 1 or not 0 <= train.batch_ramp_fraction <= 1:
        raise CrammingError("train.batch_size must be positive and train.batch_ramp_fraction in [0, 1]")
    if cfg.checkpoint.interval_minutes <= 0 or cfg.checkpoint.keep_last < 0 or cfg.logging.every_steps < 1:
        raise CrammingError("checkpoint.interval_minutes > 0, checkpoint.keep_last >= 0, logging.every_steps >= 1")
    check_wandb_config(cfg.wandb)


def new_run_dir(cfg) -> Path:
    run_dir = Path(cfg.output_dir) / cfg.name / time.strftime("%Y-%m-%d_%H-%M-%S")
    suffix = 1
    while run_dir.exists():  # two runs started in the same second
        run_dir = run_dir.with_name(f"{run_dir.name.split('.')[0]}.{suffix}")
        suffix += 1
    run_dir.mkdir(parents=True)
    return run_dir


def autocast(settings: Settings):
    if settings.device.type != "cuda" or settings.precision == "fp32":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if settings.precision == "bf16" else torch.float16
    return torch.autocast("cuda", dtype=dtype)


def pretrain(cfg) -> Path:
    """Train under the budget; returns the run directory (with checkpoints/final on success)."""
    check_train_config(cfg)
    device_type = "cuda" if torch.cuda.is_available() and OmegaConf.select(cfg, "gpu.device") == "cuda" else "cpu"
    dist = Distributed.from_env(device_type)
    try:
        return _pretrain(cfg, dist)
    finally:
        dist.close()


def _pretrain(cfg, dist: Distributed) -> Path:
    started = time.perf_counter()
    settings = resolve_settings(cfg, dist.local_rank)
    torch.manual_seed(cfg.train.seed)
    if settings.device.type == "cpu":
        torch.set_flush_denormal(True)
    else:
        torch.cuda.set_device(settings.device)
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True

    # Data preparation is outside the budget; rank 0 builds, the others then find it in the cache.
    if dist.is_main:
        dataset, reused = prepare_dataset(cfg.data, cfg.cache_dir)
        log.info("data: %s (%s, %d rows)", dataset.path, "cached" if reused else "prepared", dataset.num_rows)
    dist.barrier()
    dataset, _ = prepare_dataset(cfg.data, cfg.cache_dir) if not dist.is_main else (dataset, True)
    vocab_size = dataset.meta["vocab_size"]
    tokenizer = as_transformers_tokenizer(load_tokenizer(dataset.tokenizer_path), dataset.seq_length)

    model = build_mlm_model(cfg.arch, vocab_size).to(settings.device)
    optimizer = build_optimizer(model, cfg.train.optim)
    scaler = torch.amp.GradScaler("cuda") if settings.precision == "fp16" else None
    checkpoint = ckpt.resolve_resume(cfg.resume, Path(cfg.output_dir), cfg.name) if cfg.resume else None
    state = ckpt.load_state(checkpoint) if checkpoint else None
    settings, microbatch_source = _choose_microbatch(cfg, settings, dist, model, dataset, state)
    progress, run_dir = Progress(), None
    if checkpoint:
        progress, run_dir = _restore(cfg, settings, dist, checkpoint, state, model, optimizer, scaler)
        log.info("resuming %s at step %d, %s of budget used", checkpoint, progress.step,
                 format_duration(progress.elapsed))
    if dist.is_main and run_dir is None:
        run_dir = new_run_dir(cfg)
    run_dir = Path(dist.broadcast(str(run_dir) if run_dir else None))
    if dist.is_main:
        (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))

    wall_budget = budget_seconds(cfg.budget, cfg.budget_scaling, settings.profile, _device_profile(settings))
    wall_budget /= dist.world_size  # GPU-hours: N GPUs get 1/N of the wall time
    flops_per_token = training_flops_per_token(cfg.arch, vocab_size, dataset.seq_length, cfg.train.mlm_rate)
    metrics = MetricsLog(run_dir / "metrics.jsonl", progress.step if cfg.resume else None, progress.tokens,
                         flops_per_token, settings.profile.peak_tflops) if dist.is_main else None
    log.info("run %s | %s on %s (%s, microbatch %d (%s) x %d ranks, compile %s) | budget %s wall",
             run_dir, cfg.arch.name, settings.profile.name, settings.precision, settings.microbatch_size,
             microbatch_source, dist.world_size, settings.compile, format_duration(wall_budget))

    if settings.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(settings.device)  # the peak of training, not of the search
    logger = WandbLogger(cfg, run_dir) if dist.is_main else None
    sampler = TelemetrySampler(settings.device).start() if dist.is_main else None
    clock = BudgetClock(wall_budget, progress.elapsed)
    trainer = _Loop(cfg, settings, dist, dataset, model, optimizer, scaler, tokenizer, run_dir, metrics,
                    clock, progress, logger, sampler)
    stop_reason = "error"
    try:
        try:
            stop_reason = trainer.run()
        except NonFiniteLossError:
            stop_reason = "non-finite"
            raise
        except KeyboardInterrupt:
            stop_reason = "interrupted"
            raise
        finally:  # however training ended, leave its record (rank 0)
            if dist.is_main:
                summary = _leave_record(trainer, stop_reason, time.perf_counter() - started, microbatch_source)
        if cfg.eval is not None and dist.is_main:
            from cramming.eval.run import run_glue

            log.info("GLUE evaluation of the final checkpoint (outside the budget)")
            results = run_glue(cfg.eval, run_dir / "checkpoints" / ckpt.FINAL, run_dir / "glue")
            summary["glue_score"] = results["glue_score"]
            write_summary(run_dir / "summary.json", summary)
            logger.summary({"score": results["glue_score"], **{f"{split}/{metric}": value for split, scores
                            in results["scores"].items() for metric, value in scores.items()}}, prefix="glue/")
    finally:
        if logger is not None:
            logger.finish(failed=stop_reason not in ("budget", "max_steps"))
    return run_dir


def _leave_record(trainer: "_Loop", stop_reason: str, session_wall_s: float, microbatch_source: str) -> dict:
    """Stop the telemetry, then write summary.json and the plots and hand the summary to W&B."""
    energy = trainer.sampler.energy_wh()
    trainer.sampler.stop()
    progress, clock, run_dir = trainer.progress, trainer.clock, trainer.run_dir
    summary = build_summary(
        records=read_records(run_dir / "metrics.jsonl"), stop_reason=stop_reason,
        progress=dataclasses.asdict(progress), budget_hours=trainer.cfg.budget, wall_budget=clock.budget_seconds,
        session_training_s=progress.elapsed - clock.elapsed_before, session_wall_s=session_wall_s,
        first_steps=trainer.first_steps, peak_memory=peak_memory_gb(trainer.settings.device), energy_wh=energy,
        flops_per_token=trainer.metrics.flops_per_token, peak_tflops=trainer.settings.profile.peak_tflops,
        microbatch={"size": trainer.settings.microbatch_size, "source": microbatch_source},
    )
    write_summary(run_dir / "summary.json", summary)
    plot_run(run_dir)
    trainer.logger.summary(summary, prefix="summary/")
    log.info("summary: %s; plots: %s", run_dir / "summary.json", run_dir / "plots")
    return summary


def _choose_microbatch(cfg, settings: Settings, dist: Distributed, model, dataset: PreparedDataset,
                       state: dict | None) -> tuple[Settings, str]:
    """The microbatch size and where it came from, before the clock starts (the search is outside the budget).

    impl.microbatch_size when set; else a resumed run's checkpoint's (its fingerprint must match); else on
    the CPU the profile's; else on a GPU the largest power of two that fits, searched upward from the
    profile's microbatch_size and cached per GPU, architecture, sequence length and precision.
    """
    if settings.microbatch_size is not None:
        return settings, "impl.microbatch_size"
    if state is not None:
        return dataclasses.replace(settings, microbatch_size=state["fingerprint"]["microbatch_size"]), "checkpoint"
    if settings.device.type == "cpu":
        return dataclasses.replace(settings, microbatch_size=settings.profile.microbatch_size), "cpu profile"
    chosen = None
    if dist.is_main:
        parameter_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
        extra = parameter_bytes * (3 if dist.enabled else 2)  # AdamW's two moments, DDP's gradient buckets
        step = cuda_step(model, lambda n: Microbatches(dataset, n, 0, 1, cfg.train.mlm_rate, cfg.train.seed)[0],
                         lambda: autocast(settings), extra)
        usable = (1 - MEMORY_MARGIN) * torch.cuda.get_device_properties(settings.device).total_memory
        limit = max(cfg.train.batch_size // dist.world_size, 1)
        key = cache_key(settings.device, OmegaConf.to_container(cfg.arch, resolve=True), dataset.seq_length,
                        settings.precision, dist.world_size)
        with torch.random.fork_rng(devices=[settings.device]):
            chosen = cached_search(Path(cfg.cache_dir).expanduser(), key, lambda: search_microbatch(
                step, settings.profile.microbatch_size, limit, usable))
    size, source = dist.broadcast(chosen)
    return dataclasses.replace(settings, microbatch_size=size), f"auto ({source})"


def _device_profile(settings: Settings) -> GpuProfile:
    """The profile of the device actually in use (for budget scaling)."""
    if settings.device.type == "cpu":
        return known_profiles()["cpu"]
    return resolve_auto(GpuProfile(name="auto"), known_profiles())


def _resume_fingerprint(cfg, settings: Settings, world_size: int) -> dict:
    sections = {key: OmegaConf.to_container(cfg[key], resolve=True) for key in RESUME_MUST_MATCH}
    return {**sections, "microbatch_size": settings.microbatch_size, "world_size": world_size}


def _restore(cfg, settings, dist, checkpoint: Path, state: dict, model, optimizer, scaler) -> tuple[Progress, Path]:
    expected = _resume_fingerprint(cfg, settings, dist.world_size)
    differing = [key for key in expected if state["fingerprint"].get(key) != expected[key]]
    if differing:
        raise CrammingError(
            f"resume={cfg.resume}: this run's {', '.join(differing)} differ from the checkpoint's; "
            "resume with the same settings (or start a new run)"
        )
    model.load_state_dict(read_weights(checkpoint))
    optimizer.load_state_dict(state["optimizer"])
    if scaler is not None and state["scaler"]:
        scaler.load_state_dict(state["scaler"])
    torch.set_rng_state(state["rng"]["torch"])
    if settings.device.type == "cuda" and state["rng"]["cuda"] is not None:
        torch.cuda.set_rng_state(state["rng"]["cuda"], settings.device)
    return Progress(**state["progress"]), checkpoint.parent.parent


class _Loop:
    def __init__(self, cfg, settings, dist, dataset: PreparedDataset, model, optimizer, scaler, tokenizer,
                 run_dir: Path, metrics: MetricsLog | None, clock: BudgetClock, progress: Progress,
                 logger: WandbLogger | None, sampler: TelemetrySampler | None):
        self.cfg, self.settings, self.dist = cfg, settings, dist
        self.model, self.optimizer, self.scaler, self.tokenizer = model, optimizer, scaler, tokenizer
        self.run_dir, self.metrics, self.clock, self.progress = run_dir, metrics, clock, progress
        self.logger, self.sampler = logger, sampler
        self.first_steps: list[tuple[float, int]] = []  # (seconds, microbatches) of this process's first steps
        self.seq_length = dataset.seq_length
        self.sequences_per_microbatch = settings.microbatch_size * dist.world_size
        microbatches = Microbatches(dataset, settings.microbatch_size, dist.rank, dist.world_size,
                                    cfg.train.mlm_rate, cfg.train.seed)
        self.stream = microbatch_stream(microbatches, progress.microbatches, settings.num_workers,
                                        pin_memory=settings.device.type == "cuda")
        network = model
        if dist.enabled:
            network = torch.nn.parallel.DistributedDataParallel(
                model, device_ids=[settings.device.index] if settings.device.type == "cuda" else None
            )
        self.network = torch.compile(network) if settings.compile else network
        self.last_checkpoint_at = clock.elapsed

    def fraction(self) -> float:
        train = self.cfg.train
        if train.progress == "steps":
            return min(self.progress.step / train.max_steps, 1.0)
        return self.clock.fraction

    def done(self) -> bool:
        max_steps = self.cfg.train.max_steps
        return self.fraction() >= 1.0 or self.clock.expired() or (max_steps and self.progress.step >= max_steps)

    def run(self) -> str:
        """Train until the budget or max_steps; returns which ("budget" or "max_steps")."""
        cfg = self.cfg
        loss_since_log = torch.zeros((), device=self.settings.device)
        steps_since_log = 0
        self.clock.start()
        if self.metrics:
            self.metrics.start()
        while not self.dist.any(self.done(), self.settings.device):
            fraction = self.fraction()
            accumulate = accumulation_steps(fraction, self.sequences_per_microbatch, cfg.train.batch_size,
                                            cfg.train.batch_ramp_fraction)
            lr = cfg.train.optim.lr * lr_multiplier(cfg.train.lr_schedule, fraction, cfg.train.warmup_fraction)
            for group in self.optimizer.param_groups:
                group["lr"] = lr
            step_started = self.clock.elapsed
            step_loss, done = self._accumulate(accumulate)
            if self._apply(step_loss):  # its finiteness check waits for the step's forward and backward
                loss_since_log += step_loss
                steps_since_log += 1
            if len(self.first_steps) < TIMED_FIRST_STEPS:
                self.first_steps.append((self.clock.elapsed - step_started, done))
            self.progress.step += 1
            self.progress.tokens += done * self.sequences_per_microbatch * self.seq_length
            self.progress.elapsed = self.clock.elapsed
            if self.progress.step % cfg.logging.every_steps == 0 and steps_since_log:
                self._log(loss_since_log / steps_since_log, lr, done)
                loss_since_log.zero_()
                steps_since_log = 0
            if self.clock.elapsed - self.last_checkpoint_at >= cfg.checkpoint.interval_minutes * 60:
                self._checkpoint(ckpt.step_name(self.progress.step))
        if steps_since_log:
            self._log(loss_since_log / steps_since_log, lr, done)
        self.progress.elapsed = self.clock.elapsed
        self._checkpoint(ckpt.FINAL)
        log.info("done: %d steps, %s tokens, %s of training, %d non-finite steps skipped; final checkpoint %s",
                 self.progress.step, f"{self.progress.tokens:,}", format_duration(self.progress.elapsed),
                 self.progress.nonfinite_total, self.run_dir / "checkpoints" / ckpt.FINAL)
        max_steps = cfg.train.max_steps
        return "max_steps" if max_steps and self.progress.step >= max_steps else "budget"

    def _accumulate(self, accumulate: int) -> tuple[torch.Tensor, int]:
        """Forward and backward up to `accumulate` microbatches; returns the mean loss and how many ran.

        If the budget runs out first, the step is taken with the microbatches done so far: their
        gradients (and loss) are rescaled to a mean over that smaller batch, so no compute is wasted.
        """
        step_loss = torch.zeros((), device=self.settings.device)
        done = 0
        while done < accumulate:
            if done and self.cfg.train.progress == "budget" and self.dist.any(self.clock.expired(),
                                                                              self.settings.device):
                break
            batch = {key: value.to(self.settings.device, non_blocking=True) for key, value in next(self.stream).items()}
            last = done + 1 == accumulate
            sync = contextlib.nullcontext() if last or not self.dist.enabled else self.network.no_sync()
            with sync:
                with autocast(self.settings):
                    loss = self.network(**batch).loss
                scaled = loss / accumulate
                (self.scaler.scale(scaled) if self.scaler else scaled).backward()
            step_loss += loss.detach() / accumulate
            done += 1
            self.progress.microbatches += 1
        if done < accumulate:  # the last microbatch ran under no_sync: average the gradients here
            self.dist.average_gradients(self.model)
            for parameter in self.model.parameters():
                if parameter.grad is not None:
                    parameter.grad.mul_(accumulate / done)
            step_loss *= accumulate / done
        return self.dist.mean(step_loss), done

    def _apply(self, step_loss: torch.Tensor) -> bool:
        """Clip and step; a non-finite loss skips the step (and stops the run if it keeps happening)."""
        if not torch.isfinite(step_loss):
            self.optimizer.zero_grad(set_to_none=True)
            self.progress.nonfinite_total += 1
            self.progress.nonfinite_in_a_row += 1
            log.warning("step %d: non-finite loss, step skipped (%d in a row)", self.progress.step + 1,
                        self.progress.nonfinite_in_a_row)
            if self.progress.nonfinite_in_a_row >= self.cfg.train.max_nonfinite_steps:
                raise NonFiniteLossError(
                    f"{self.progress.nonfinite_in_a_row} non-finite losses in a row at step {self.progress.step + 1}: "
                    f"stopping; the last good checkpoint is kept in {self.run_dir / 'checkpoints'} "
                    "(try a lower train.optim.lr or impl.precision=bf16)"
                )
            return False
        self.progress.nonfinite_in_a_row = 0
        if self.scaler:
            self.scaler.unscale_(self.optimizer)
        if self.cfg.train.optim.grad_clip:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.train.optim.grad_clip)
        if self.scaler:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return True

    def _log(self, loss: torch.Tensor, lr: float, accumulate: int) -> None:
        if self.metrics is None:
            return
        record = self.metrics.record(
            step=self.progress.step, microbatches=self.progress.microbatches, tokens=self.progress.tokens,
            elapsed=self.clock.elapsed, remaining=self.clock.remaining, budget_fraction=self.clock.fraction,
            loss=loss.item(), lr=lr, batch_size=accumulate * self.sequences_per_microbatch,
            nonfinite=self.progress.nonfinite_total, telemetry=self.sampler.read(),
        )
        self.logger.log(record)

    def _checkpoint(self, name: str) -> None:
        self.last_checkpoint_at = self.clock.elapsed
        if not self.dist.is_main:
            return
        cuda = self.settings.device.type == "cuda"
        state = {
            "progress": dataclasses.asdict(self.progress),
            "optimizer": self.optimizer.state_dict(),
            "scaler": self.scaler.state_dict() if self.scaler else None,
            "rng": {"torch": torch.get_rng_state(), "cuda": torch.cuda.get_rng_state(self.settings.device) if cuda else None},
            "fingerprint": _resume_fingerprint(self.cfg, self.settings, self.dist.world_size),
        }
        ckpt.save_checkpoint(self.run_dir, name, self.model, self.tokenizer, state, self.cfg.checkpoint.keep_last)
        if name != ckpt.FINAL:  # the end of the run draws its own, whatever way it ends
            plot_run(self.run_dir)
