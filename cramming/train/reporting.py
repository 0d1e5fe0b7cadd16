"""What a run shows while it trains: one console line and one metrics.jsonl record every `logging.every_steps`
steps, each with the hardware telemetry of its interval (telemetry.py); a progress bar on a terminal; and Weights &
Biases (rank 0: the resolved config, every record, GLUE and the summary). `wandb=disabled` (the default) never
imports wandb; `wandb=offline` needs no account and writes the W&B run inside the run directory (<run>/wandb), to
upload later with `wandb sync`.
"""

import hashlib
import json
import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
from omegaconf import OmegaConf

from cramming.engine.hardware import model_flops_utilization
from cramming.errors import CrammingError
from cramming.files import write_atomically
from cramming.train.callbacks import Callback, TrainState
from cramming.train.runs import read_records
from cramming.train.telemetry import TelemetrySampler

log = logging.getLogger("pretrain")


def finite(value: float, digits: int = 5) -> float | None:
    """A figure for a record: rounded, or None (JSON null) where a diverging run made it inf or NaN."""
    return round(value, digits) if math.isfinite(value) else None


def format_duration(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m{seconds % 60:02d}s"


@dataclass
class StepFacts:
    """What one record says about training at its step; MetricsLog adds the interval's speed and MFU."""

    step: int
    microbatches: int
    tokens: int
    elapsed: float  # on the budget clock
    remaining: float
    budget_fraction: float
    loss: float  # mean over the interval's steps
    lr: float
    batch_size: int
    nonfinite: int  # non-finite steps skipped so far
    grad_norm: float  # mean over the interval's steps, before clipping
    clipped_fraction: float | None  # of those steps (None without grad_clip)
    telemetry: dict
    validation: dict | None = None
    planned_batch_size: int | None = None  # set when the budget ran out mid-step and the step took fewer sequences
    not_training_s: float = 0.0  # wall seconds so far of validations, checkpoint writes and plots: out of tokens/s
    pauses_left_s: float | None = 0.0  # the validations still to come, expected wall seconds (None: not known yet)


class WandbLogger:
    def __init__(self, cfg, run_dir: Path):
        mode = cfg.wandb.mode
        self.run = None
        if mode == "disabled":
            return
        import wandb  # noqa: PLC0415 -- wandb=disabled, the default, never imports it

        try:
            self.run = wandb.init(
                project=cfg.wandb.project,
                entity=cfg.wandb.entity,
                mode=mode,
                dir=run_dir,
                name=f"{cfg.name}/{run_dir.name}",
                id=hashlib.sha256(str(run_dir.resolve()).encode()).hexdigest()[:16],  # a resume continues it
                resume="allow",
                config=OmegaConf.to_container(cfg, resolve=True),
            )
        except wandb.errors.Error as error:  # no API key, no network, no such entity
            advice = "; run `wandb login`, or use wandb=offline" if mode == "online" else ""
            raise CrammingError(f"wandb={mode}: W&B did not start ({error}){advice}") from None

    def log(self, record: dict) -> None:
        if self.run is not None:
            self.run.log({key: value for key, value in record.items() if value is not None and key != "step"},
                         step=record["step"])

    def summary(self, values: dict, prefix: str = "") -> None:
        """Add run-level results (the run summary, GLUE scores) to the W&B run's summary."""
        if self.run is not None:
            self.run.summary.update({f"{prefix}{key}": value for key, value in values.items() if value is not None})

    def finish(self, failed: bool) -> None:
        if self.run is not None:
            self.run.finish(exit_code=1 if failed else 0)


class MetricsLog:
    """Appends records to metrics.jsonl (rank 0 only); on resume drops records past the checkpoint, in an
    atomic rewrite: a kill during it leaves the old file, never an empty one."""

    def __init__(self, path: Path, resume_step: int | None, tokens: int, flops_per_token: float,
                 peak_tflops: float | None):
        self.path = path
        self.flops_per_token = flops_per_token
        self.peak_tflops = peak_tflops
        if resume_step is not None and path.exists():
            records = read_records(path)
            if len(records) < len(path.read_text().splitlines()):
                log.warning("%s: dropped its torn last line (the run was killed while writing it)", path)
            kept = [record for record in records if record["step"] <= resume_step]
            write_atomically(path, "".join(json.dumps(record) + "\n" for record in kept))
        self.last_time = time.perf_counter()
        self.last_tokens = tokens
        self.last_not_training = 0.0

    def start(self) -> None:
        """Mark the start of training, for the first tokens/s figure."""
        self.last_time = time.perf_counter()

    def record(self, facts: StepFacts) -> dict:
        """Append the record of `facts` and log its console line; returns the record."""
        f = facts
        now = time.perf_counter()
        interval = now - self.last_time - (f.not_training_s - self.last_not_training)  # training alone
        tokens_per_s = (f.tokens - self.last_tokens) / interval if interval > 0 else None
        self.last_time, self.last_tokens, self.last_not_training = now, f.tokens, f.not_training_s
        mfu = model_flops_utilization(tokens_per_s, self.flops_per_token, self.peak_tflops) if tokens_per_s else None
        record = {
            "step": f.step,
            "microbatches": f.microbatches,
            "elapsed": round(f.elapsed, 3),
            "tokens": f.tokens,
            "loss": round(f.loss, 5),
            "lr": f.lr,
            "batch_size": f.batch_size,
            **({"planned_batch_size": f.planned_batch_size} if f.planned_batch_size else {}),
            "tokens_per_s": round(tokens_per_s, 1) if tokens_per_s else None,
            "mfu": round(mfu, 4) if mfu is not None else None,
            "nonfinite_skipped": f.nonfinite,
            "grad_norm": finite(f.grad_norm),
            "clipped_fraction": f.clipped_fraction,
            **{key: finite(value) for key, value in (f.validation or {}).items()},
            **f.telemetry,
        }
        try:
            with open(self.path, "a") as handle:
                handle.write(json.dumps(record) + "\n")
        except OSError as error:  # a full disk fails on closing, where Python names no file: name it
            raise OSError(error.errno, error.strerror, str(self.path)) from None
        eta = time.strftime("%H:%M", time.localtime(time.time() + f.remaining + (f.pauses_left_s or 0.0)))
        eta += " + validations" if f.pauses_left_s is None else ""
        log.info(
            "step %d | budget %.1f%% used, %s left (ETA %s) | loss %.4f%s | lr %.2e | batch %d%s | grad norm %.3g | "
            "%s tok/s | MFU %s%s",
            f.step, 100 * f.budget_fraction, format_duration(f.remaining), eta, f.loss,
            _validation_note(f.validation), f.lr, f.batch_size,
            f" of {f.planned_batch_size} (the budget ran out mid-step)" if f.planned_batch_size else "", f.grad_norm,
            f"{tokens_per_s:,.0f}" if tokens_per_s else "-", f"{100 * mfu:.1f}%" if mfu is not None else "n/a",
            _hardware(f.telemetry),
        )
        return record

    def amend_last(self, extra: dict) -> None:
        """Add keys to the last record (a validation at the step of the record just written)."""
        records = read_records(self.path)
        if not records:  # a resume of a checkpoint whose run left no records, with no step since
            return
        records[-1].update({key: finite(value) for key, value in extra.items()})
        write_atomically(self.path, "".join(json.dumps(record) + "\n" for record in records))


def _validation_note(validation: dict | None) -> str:
    """The progress line's note of a validation: its loss, and BLiMP and bits per character where measured."""
    if not validation:
        return ""
    zero_shot = (f", BLiMP {validation['blimp']:.1f}%, {validation['bits_per_char']:.3f} bits/char"
                 if "blimp" in validation else "")
    return f" (validation {validation['val_loss']:.4f}{zero_shot})"


_CONSOLE = (("gpu_util", "GPU {:.0f}%"), ("gpu_mem_gb", "{:.1f} GiB"), ("gpu_temp_c", "{:.0f}°C"),
            ("gpu_power_w", "{:.0f} W"), ("cpu_util", "CPU {:.0f}%"), ("rss_gb", "{:.1f} GiB"))


def _hardware(telemetry: dict) -> str:
    """The console's short form of the telemetry, e.g. ` | GPU 97% 61.2 GiB 71°C 290 W`."""
    shown = " ".join(form.format(telemetry[key]) for key, form in _CONSOLE if key in telemetry)
    return f" | {shown}" if shown else ""


TIMED_FIRST_STEPS = 5  # steps whose durations estimate the compile time (summary.json's compile_s)


class MetricsLogger(Callback):
    """Rank 0's record of the run: the mean loss of the steps since the last record (skipped steps have
    none), with lr, batch, throughput and telemetry, every `every_steps` steps, whenever training has
    progressed `every_fraction` since the last record (so a short run still draws a curve), and once at the
    end. Both rules follow the schedule's progress (steps, or the budget clock), never the wall clock alone.

    The loss, gradient norm and clipped count are summed on the device and read only when a record is
    written, so logging does not wait for the GPU at every step. The partial sums ride in checkpoints: a
    resumed run writes the same records. A validation (state.validation) goes into the next record.
    """

    name = "metrics"

    def __init__(self, metrics: MetricsLog, every_steps: int, every_fraction: float, sequences_per_microbatch: int,
                 sampler: TelemetrySampler, wandb: WandbLogger, device: torch.device, grad_clip: float | None,
                 pauses_left: Callable[[], float | None] = lambda: 0.0):
        self.metrics, self.every_steps, self.sequences_per_microbatch = metrics, every_steps, sequences_per_microbatch
        self.pauses_left = pauses_left  # the validations still to come, in expected wall seconds (the ETA's)
        self.every_fraction = every_fraction
        self.recorded_fraction = 0.0  # progress at the last record
        self.sampler, self.wandb, self.grad_clip = sampler, wandb, grad_clip
        self.sums = torch.zeros(4, device=device)  # loss, grad norm, clipped steps, steps (skipped ones add 0)
        self.pending = 0  # steps run since the last record, skipped ones included
        self.last_record: dict | None = None  # for the progress bar
        self.first_steps: list[tuple[float, int]] = []  # (seconds, microbatches) of this process's first steps
        self.step_started = 0.0

    def on_train_start(self, state: TrainState) -> None:
        self.metrics.start()

    def before_step(self, state: TrainState) -> None:
        self.step_started = state.clock.elapsed

    def after_step(self, state: TrainState) -> None:
        if len(self.first_steps) < TIMED_FIRST_STEPS:
            self.first_steps.append((state.clock.elapsed - self.step_started, state.step_microbatches))
        limit = self.grad_clip if state.grad_clip is None else state.grad_clip  # the step's (train.optim.clip_schedule)
        clipped = state.grad_norm > limit if self.grad_clip else torch.zeros((), device=self.sums.device)
        step_sums = torch.stack([state.step_loss.float(), state.grad_norm.float(), clipped.float(),
                                 torch.ones((), device=self.sums.device)])
        self.sums += torch.where(state.step_finite, step_sums, 0.0)  # on the device: no wait for the flag
        self.pending += 1
        due = (state.progress.step % self.every_steps == 0 or state.validation
               or state.fraction - self.recorded_fraction >= self.every_fraction)
        if due and self.pending:
            self._write(state)

    def on_train_end(self, state: TrainState, reason: str) -> None:
        if not (self.pending and self._write(state)) and state.validation:  # validated at the last record's step
            self.metrics.amend_last(state.validation)
            self.wandb.log({"step": state.progress.step, **state.validation})
            state.validation = None

    def _write(self, state: TrainState) -> bool:
        """Write the record of the steps since the last; False (nothing written) when all were skipped."""
        progress, clock = state.progress, state.clock
        loss, grad_norm, clipped, steps = torch.cat([self.sums[:3] / self.sums[3], self.sums[3:]]).tolist()
        if not steps:
            return False
        state.nonfinite.read(progress, progress.step)  # the skipped count as of this step
        record = self.metrics.record(StepFacts(
            step=progress.step, microbatches=progress.microbatches, tokens=progress.tokens,
            elapsed=clock.elapsed, remaining=clock.remaining, budget_fraction=clock.fraction,
            loss=loss, lr=state.lr, batch_size=state.step_microbatches * self.sequences_per_microbatch,
            planned_batch_size=state.accumulate * self.sequences_per_microbatch
            if state.step_microbatches < state.accumulate else None,
            nonfinite=progress.nonfinite_total, grad_norm=grad_norm,
            clipped_fraction=round(clipped, 4) if self.grad_clip else None, telemetry=self.sampler.read(),
            validation=state.validation, not_training_s=clock.not_training_seconds, pauses_left_s=self.pauses_left(),
        ))
        self.wandb.log(record)
        self.last_record = record
        self.sums.zero_()
        self.pending = 0
        self.recorded_fraction = state.fraction
        state.validation = None
        return True

    def state_dict(self) -> dict:
        recorded = {"recorded_fraction": self.recorded_fraction}
        *sums, steps = self.sums.tolist()
        return {"sums": sums, "steps": int(steps), **recorded} if steps else recorded

    def load_state_dict(self, state: dict) -> None:
        self.recorded_fraction = state.get("recorded_fraction", 0.0)  # absent in checkpoints before it
        if "steps" not in state:
            return
        # checkpoints written before gradient norms were logged hold the loss sum alone
        sums = state["sums"] if "sums" in state else [state["loss_sum"], 0.0, 0.0]
        self.sums.copy_(torch.tensor([*sums, state["steps"]]))
        self.pending = state["steps"]
