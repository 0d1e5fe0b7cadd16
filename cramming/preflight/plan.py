"""`preflight=true`: what only trying shows, after every check of cramming.preflight.checks.

`preflight` (pretrain.py ... preflight=true) runs check_run's pass, then a hub corpus's first records, one
microbatch forward and backward of the real model on the real device at the planned size (compiled where the run
compiles: the trial), and the plan: budget and end time, tokens and steps, passes over the data, checkpoints and
their disk, and what runs at the end. Exit 2 with every problem listed; else 0, saying "cleanly" only when nothing
is left unchecked and nothing to warn of, and otherwise listing what it could not check and its warnings.
"""

import dataclasses
import math
import shutil
import time
from datetime import datetime, timedelta

import torch
from omegaconf import OmegaConf

from cramming.data.mlm import synthetic_mlm_batch
from cramming.errors import CrammingError, problems_of, size_text
from cramming.eval.tasks.base import absent_text
from cramming.model import build_mlm_model
from cramming.model.config import as_model_config
from cramming.preflight.checks import (DiskNeed, device_and_budget, disk_needs, look_at_data, nearest_existing,
                                      run_problems, wandb_fallback, wandb_host)
from cramming.train.data_repeats import MANY_EPOCHS
from cramming.train.distributed import Distributed
from cramming.train.loop import Schedule
from cramming.train.microbatch import choose_microbatch
from cramming.train.reporting import format_duration
from cramming.train.stopping import simulated_microbatch_seconds


def preflight(cfg) -> int:
    """Everything check_run checks, the data source's first records, one microbatch forward and backward, and
    the plan (printed); 0 when the run would start cleanly, 2 after listing every problem."""
    started, skipped = time.perf_counter(), {}
    problems, unchecked = run_problems(cfg, skipped), []
    if not problems:  # (a local corpus was looked at by run_problems: its notes are kept from then)
        problems = problems_of(lambda: unchecked.extend(look_at_data(cfg, hub=True)))
    if cfg.eval is not None and cfg.eval.data_dir is None:
        unchecked.append("GLUE's tasks from the hub (eval.data_dir=null): downloaded at the end of the run")
    trial, tried = None, not problems  # a model built from a config with problems would fail for their reasons
    try:
        settings, seconds = device_and_budget(cfg)
    except CrammingError:  # listed among the problems already
        settings = seconds = None
    if tried:
        try:
            trial = trial_microbatch(cfg, settings)
        except CrammingError as error:
            problems.append(str(error))
    try:
        needs = disk_needs(cfg)
    except CrammingError:  # listed among the problems already
        needs = []
    offline = wandb_fallback(cfg)
    for line in plan(cfg, trial, seconds, needs, skipped, offline):
        print(line)
    if not tried:
        print("  microbatch trial: not run until the problems below are fixed")
    if problems:
        print(f"preflight: {len(problems)} problem(s); the run would not start:")
        for number, problem in enumerate(problems, 1):
            print(f"  {number}. {problem}")
        return 2
    passes = data_passes(_expected(cfg, trial, seconds)[0], needs) if trial and seconds else None
    notes = ([f"the data repeats: about {passes:,.0f} passes over it, and past {MANY_EPOCHS} more passes are worth "
              "little; give more data or a shorter budget"] if passes is not None and passes > MANY_EPOCHS else [])
    notes += [f"not checked before the run: {what}" for what in unchecked]
    notes += [f"eval.skip_missing=true: no data for {absent_text(skipped)}; the end of the run would skip it"
              ] * bool(skipped)
    notes += [f"wandb=online: {wandb_host()} cannot be reached ({offline}); the run would log to W&B offline "
              "(wandb.if_unreachable=offline), to `wandb sync` later"] * bool(offline)
    checked = f"checked in {time.perf_counter() - started:.1f} s"
    if notes:
        print(f"preflight: the run would start, no problem found ({checked}), but:")
        for number, note in enumerate(notes, 1):
            print(f"  {number}. {note}")
        return 0
    print(f"preflight: the run would start cleanly ({checked})")
    return 0


@dataclasses.dataclass
class Trial:
    microbatch_size: int
    microbatch_source: str
    seconds_first: float  # compilation included where the run compiles
    seconds_after: float  # the median of the microbatches after it
    device: str
    # what the budget clock charges a microbatch: CRAMMING_SIMULATED_MICROBATCH_SECONDS where set (the run is then
    # planned exactly as it will step), else the trial's own seconds_after
    clock_seconds: float | None = None

    @property
    def charged(self) -> float:
        return self.seconds_after if self.clock_seconds is None else self.clock_seconds


TRIAL_MICROBATCHES = 3


def trial_microbatch(cfg, settings) -> Trial:
    """Forward and backward of the real model on the real device at the planned microbatch (the GPU's automatic
    search included), compiled if the run compiles; synthetic tokens: the work depends on shapes, not text."""
    from cramming.engine.step import backward  # noqa: PLC0415 -- a test replaces cramming.engine.step.backward

    vocab_size, seq_length = cfg.data.tokenizer.vocab_size, cfg.data.seq_length
    model = build_mlm_model(as_model_config(cfg.arch), vocab_size).to(settings.device)
    settings, source = choose_microbatch(cfg, settings, Distributed.from_env(), model, vocab_size, seq_length, None)
    network = torch.compile(model) if settings.compile else model
    batch = {key: value.to(settings.device) for key, value in
             synthetic_mlm_batch(settings.microbatch_size, seq_length, vocab_size, cfg.train.mlm_rate).items()}
    scaler, seconds = settings.precision.grad_scaler(), []
    try:
        for _ in range(TRIAL_MICROBATCHES):
            begun = time.perf_counter()
            loss = backward(network, batch, settings.precision.autocast(), scaler)
            if not torch.isfinite(loss):
                raise CrammingError(f"preflight: the first microbatch's loss is {loss.item()}")
            if settings.device.type == "cuda":
                torch.cuda.synchronize(settings.device)
            seconds.append(time.perf_counter() - begun)
            model.zero_grad(set_to_none=True)
    except torch.OutOfMemoryError:
        raise CrammingError(f"preflight: microbatch {settings.microbatch_size} ({source}) does not fit in "
                            f"{settings.device}'s memory: set impl.microbatch_size smaller") from None
    except Exception as error:
        if isinstance(error, CrammingError):
            raise
        raise CrammingError(f"preflight: microbatch {settings.microbatch_size} ({source}) failed on "
                            f"{settings.device}{' compiled' if settings.compile else ''}: {type(error).__name__}: "
                            f"{str(error).splitlines()[0] if str(error) else ''}") from None
    after = sorted(seconds[1:])[len(seconds[1:]) // 2]
    return Trial(settings.microbatch_size, source, seconds[0], after, str(settings.device),
                 simulated_microbatch_seconds())


def plan(cfg, trial: Trial | None, seconds: float | None, needs: list[DiskNeed], skipped: dict[str, str],
         offline: str | None) -> list[str]:
    """The run in a few lines: what, where, how long (`seconds` of wall budget, None where the device is not
    known), how much, where it logs (`offline`: why W&B would log offline though online was asked) and what follows
    it (`skipped`: what it will leave out for want of data)."""
    data = cfg.data
    lines = [f"plan: {cfg.arch.name} on gpu={cfg.gpu.name}, data={data.source}, {data.tokenizer.kind} vocabulary "
             f"{data.tokenizer.vocab_size}, sequences of {data.seq_length}"]
    if seconds is not None:
        end = datetime.now() + timedelta(seconds=seconds)
        lines.append(f"  budget: {cfg.budget:g} GPU-hours = {format_duration(seconds)} of training "
                     f"(compilation included; data preparation before it is not): if training started now it would "
                     f"end at {end:%Y-%m-%d %H:%M}")
    if trial is not None:
        sequences_per_s = trial.microbatch_size / trial.seconds_after
        lines.append(f"  microbatch: {trial.microbatch_size} sequences ({trial.microbatch_source}) on {trial.device}: "
                     f"forward and backward in {trial.seconds_first:.2f} s the first time, then "
                     f"{trial.seconds_after:.3f} s ({sequences_per_s * data.seq_length:,.0f} tokens/s before the "
                     "optimizer)")
        if trial.clock_seconds is not None:
            lines.append(f"  clock: simulated, {trial.clock_seconds:g} s a microbatch "
                         "(CRAMMING_SIMULATED_MICROBATCH_SECONDS): the plan below is the run's, step for step")
        if seconds is not None:
            tokens, steps = _expected(cfg, trial, seconds)
            pace = "on the simulated clock" if trial.clock_seconds is not None else (
                "at that speed (the optimizer, data and logging make it somewhat less)")
            lines.append(f"  expected: about {size_text(tokens, '')} tokens in about {steps:,} optimizer steps {pace}")
            lines.append(schedule_line(cfg, trial, seconds))
            passes = data_passes(tokens, needs)
            if passes is not None:
                lines.append(f"  data: that is about {passes:,.1f} passes over the dataset")
    for need in needs:
        amount = "unknown" if need.bytes is None else size_text(need.bytes)
        lines.append(f"  disk: {need.what}: {amount} in {need.where} "
                     f"({size_text(shutil.disk_usage(nearest_existing(need.where)).free)} free)")
    lines.append(f"  checkpoints: every {cfg.checkpoint.interval_minutes:g} minutes of training, the last "
                 f"{cfg.checkpoint.keep_last} kept, and final")
    if offline:
        lines.append(f"  W&B: offline, in <run>/wandb/: {wandb_host()} cannot be reached ({offline}; "
                     "wandb.if_unreachable=offline)")
    elif cfg.wandb.mode != "disabled":
        lines.append(f"  W&B: {cfg.wandb.mode}, project {cfg.wandb.project}" +
                     (" (`wandb sync <run>/wandb/offline-run-*` uploads it)" if cfg.wandb.mode == "offline" else ""))
    validation = cfg.train.validation
    if cfg.data.validation_rows:
        probe = (f", with BLiMP on {validation.blimp_pairs} pairs a paradigm and bits per character"
                 if validation.zero_shot else "")
        lines.append(f"  validation: at {', '.join(f'{100 * f:g}%' for f in validation.fractions) or 'no fraction'} "
                     f"of training and at the end{probe}")
    if cfg.eval is not None:
        source = f"from {cfg.eval.data_dir}" if cfg.eval.data_dir else "from the hub"
        tasks = ", ".join(cfg.eval.tasks) or "no task (eval.tasks is empty)"
        left_out = f"; skipped for want of data (eval.skip_missing=true): {', '.join(skipped)}" if skipped else ""
        lines.append(f"  at the end: GLUE fine-tuning on {tasks} ({source}), outside the budget{left_out}")
    else:
        lines.append("  at the end: the summary and plots; no GLUE (eval=glue adds it)")
    return lines


def data_passes(tokens: float, needs: list[DiskNeed]) -> float | None:
    """How many times `tokens` of training go through the prepared dataset (None: its size is not known)."""
    data_tokens = next((need.tokens for need in needs if need.tokens), None)
    return tokens / data_tokens if data_tokens else None


def _expected(cfg, trial: Trial, seconds: float) -> tuple[float, int]:
    """Tokens and optimizer steps at the trial's speed over the wall budget, through the batch ramp; with
    train.progress=steps, max_steps."""
    tokens, steps, _ = _simulated(cfg, trial, seconds)
    return tokens, steps


SIMULATED_STEPS = 200_000  # a longer run is simulated in strides of steps at one batch: a second, whatever the budget


def _simulated(cfg, trial: Trial, seconds: float) -> tuple[float, int, list[tuple[float, int, float]]]:
    """The run at the trial's speed: its tokens, its optimizer steps, and (f, sequences per step, lr) along it (at
    each step, or at each stride of a run past SIMULATED_STEPS steps), the schedules driven as the loop drives them
    (cramming.train.loop.Schedule)."""
    schedule = Schedule(OmegaConf.to_object(cfg.train), trial.microbatch_size)  # a dataclass: read fast
    microbatches = seconds / trial.charged
    per_microbatch = trial.microbatch_size * cfg.data.seq_length
    if cfg.train.progress == "steps":
        steps = cfg.train.max_steps
        stride = max(1, steps // SIMULATED_STEPS)
        record = [(step / steps, schedule.accumulate(step / steps) * trial.microbatch_size, schedule.lr(step / steps))
                  for step in range(0, steps, stride)]
        accumulated = stride * sum(batch for _, batch, _ in record) / trial.microbatch_size
        return min(accumulated, microbatches) * per_microbatch, steps, record
    done, steps, record, limit = 0, 0, [], cfg.train.max_steps or math.inf
    while done < microbatches and steps < limit:
        fraction = done / microbatches
        schedule.observe(fraction, done * trial.microbatch_size)
        count = schedule.accumulate(fraction)
        record.append((fraction, count * trial.microbatch_size, schedule.lr(fraction)))
        stride = int(min(max(1, microbatches / (SIMULATED_STEPS * count)), limit - steps))
        done += stride * count
        steps += stride
    return microbatches * per_microbatch, steps, record


PLAN_FRACTIONS = (0.0, 0.25, 0.5, 0.75, 0.95)


def schedule_line(cfg, trial: Trial, seconds: float) -> str:
    """The batch and the learning rate over the run, at a few fractions of it, as the plan shows them."""
    _, _, record = _simulated(cfg, trial, seconds)
    at = [next((entry for entry in record if entry[0] >= fraction), record[-1]) for fraction in PLAN_FRACTIONS]
    train = cfg.train
    floor = (f"; train.min_steps={train.min_steps} caps the final batch at the expected sequences / "
             f"{train.min_steps}" if train.min_steps is not None and train.progress == "budget" else "")
    floor += (f"; the peak lr is {train.optim.lr:.3g} x ({train.batch_size} / the final batch)^"
              f"{train.lr_batch_exponent:g}" if floor and train.lr_batch_exponent else "")
    return ("  schedule (sequences per step, lr) at " +
            ", ".join(f"{100 * fraction:g}%: {batch:,}, {lr:.2e}" for fraction, (_, batch, lr) in
                      zip(PLAN_FRACTIONS, at)) + f" ({cfg.train.lr_schedule} lr{floor})")
