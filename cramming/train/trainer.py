"""train(cfg): set up outside the budget, train under it, leave the run's record.

The trainer only composes. Set-up: settings, data, model, optimizer, resume, microbatch, run directory.
Training: the loop (train.loop) runs the step (cramming.engine.step) under the stopping rule and the schedules, and
calls the callbacks at its named points: techniques first, then the metrics record and the checkpoints.

One concept, the composition of a run, kept in one file over 300 lines so that a reader sees every part a run
is built from, and the order they are wired in, in one place.
"""

import contextlib
import dataclasses
import gc
import logging
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
from omegaconf import OmegaConf
from tqdm.contrib.logging import logging_redirect_tqdm

from cramming.data.prepare import prepare_dataset
from cramming.data.store import PreparedDataset
from cramming.data.stream import Microbatches
from cramming.data.tokenizer import as_transformers_tokenizer, load_tokenizer
from cramming.engine.device import deterministic_algorithms, prepare_device
from cramming.engine.hardware import GpuProfile, budget_seconds
from cramming.engine.step import Step
from cramming.files import WriteFailed
from cramming.model import build_mlm_model, training_flops_per_token
from cramming.provenance import config_sha256, provenance
from cramming.train.callbacks import Callback, CallbackList, TrainState, step_points
from cramming.train.checkpointing import Checkpointer, NonFiniteWeightsError
from cramming.train.data_repeats import DataRepeats
from cramming.train.distributed import Distributed, NodeHandoff
from cramming.train.loop import Schedule, run_loop
from cramming.train.microbatch import choose_microbatch
from cramming.train.nonfinite import NonFiniteLossError, NonFiniteSteps, resume_advice
from cramming.train.optimizers import build_pretraining_optimizer
from cramming.train.plots import PlotRefresh
from cramming.train.progress_bar import ProgressBar, use_bar
from cramming.train.reporting import MetricsLog, MetricsLogger, WandbLogger, format_duration
from cramming.train.resume import (Heartbeat, check_resumed_model, load_state, restore, resume_fingerprint,
                                   run_directory)
from cramming.train.runs import CONFIG_FILE, FINAL, RunStart, record_config, resolve_checkpoint, run_of
from cramming.train.settings import Settings, device_profile, resolve_settings
from cramming.train.signals import Interrupted
from cramming.train.stopping import BudgetClock, LocalAgreement, Progress, StoppingRule, time_source
from cramming.train.stopping import agreement as rank_agreement
from cramming.train.summary import RunFacts, leave_record, peak_memory_gb
from cramming.train.techniques import (RunContext, Technique, build_techniques, check_technique_inputs, data_stream,
                                       extra_memory, prepare_model, see_data, wrap_optimizer)
from cramming.train.telemetry import TelemetrySampler
from cramming.train.validation import Validation

log = logging.getLogger("pretrain")


def train(cfg, callbacks: Sequence[Callback] = (), zero_shot: Callable | None = None) -> "Trained":
    """Train under the budget a config checked whole (cramming.pretraining.check_pretrain_config); returns the
    finished training, its run directory with checkpoints/final, and on rank 0 its W&B run still open for what
    runs after it (cramming.pretraining: GLUE).

    callbacks: components acting at the loop's named points (cramming.train.callbacks), called in order after
    the techniques the config switches on (cramming.train.techniques).
    zero_shot: what builds the zero-shot probe (dataset, tokenizer, BLiMP pairs, bits rows), needed when
    train.validation.zero_shot is on; the probe is evaluation's (cramming.eval.probe), handed in from above.

    Under torchrun only training is collective: the data is prepared before the process group exists, and the
    group is gone when this returns, so no rank waits in a collective on either (cramming.train.distributed).
    """
    if cfg.train.validation.zero_shot and zero_shot is None:
        raise ValueError("train.validation.zero_shot is on: pass zero_shot (cramming.pretraining.pretrain does)")
    if "torch._dynamo" in sys.modules:  # compile afresh: earlier runs here may have spent dynamo's recompile limit
        torch.compiler.reset()  # (a process that never compiled skips it: importing dynamo to reset it costs 2 s)
    dist = Distributed.from_env()
    if not dist.is_main:  # rank 0 tells the story once; the other ranks speak up only with a warning
        log.setLevel(logging.WARNING)
    try:
        with deterministic_algorithms(cfg.impl.deterministic), RunStart(STARTED_RUN_FILES) as start:
            run = build_run(cfg, dist, start)
            log.info("%s", run)
            return train_run(run, list(callbacks), zero_shot, start)
    finally:
        dist.close()  # after an error; a finished training has left the group already


@dataclasses.dataclass
class Trained:
    """A finished training: where it lives, and on rank 0 its summary and its W&B run, still open for GLUE."""

    run_dir: Path
    is_main: bool  # rank 0 (or the only process)
    stop_reason: str
    summary: dict | None
    wandb: WandbLogger | None


# What a run directory holds before its first step: a failed start (W&B not starting, ...) leaves no more, removed.
STARTED_RUN_FILES = (CONFIG_FILE, "wandb", "metrics.jsonl")


@dataclasses.dataclass(repr=False)
class Run:
    """A run built outside the budget and ready to train: the settings, the data, the model with its optimizer
    (restored from a checkpoint when resumed) and where it writes. Printed, it says what will train."""

    cfg: Any
    dist: Distributed
    settings: Settings  # with the microbatch chosen
    microbatch_source: str  # how the microbatch was chosen
    techniques: list[Technique]
    dataset: PreparedDataset
    tokenizer: Any  # the dataset's, as a transformers tokenizer
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scaler: torch.amp.GradScaler
    fingerprint: dict  # what a resume must match (cramming.train.resume.resume_fingerprint)
    progress: Progress  # zero, or the resumed checkpoint's
    checkpoint: Path | None  # the checkpoint resumed from
    saved: dict | None  # its trainer state
    run_dir: Path
    provenance: dict
    present: GpuProfile  # the card actually in use: its peak is what MFU is measured against
    wall_budget: float  # seconds of this rank's training
    flops_per_token: float
    started: float  # time.perf_counter() when set-up began
    setup_parts: dict[str, float]  # wall seconds of the set-up's long parts: data_s, microbatch_search_s

    def __str__(self) -> str:
        settings, parameters = self.settings, sum(parameter.numel() for parameter in self.model.parameters())
        return (f"run {self.run_dir} | {self.cfg.arch.name}, {parameters / 1e6:.1f}M parameters, on "
                f"{settings.profile.name} ({settings.precision.name}, microbatch {settings.microbatch_size} "
                f"({self.microbatch_source}) x {self.dist.world_size} ranks, compile {settings.compile}) | budget "
                f"{format_duration(self.wall_budget)} wall")


def _data_repeats(cfg, training_rows: int, sequences: int, schedule: Schedule) -> DataRepeats:
    """The data-repeat notice, with the whole run's microbatches where the plan fixes them (train.progress=steps)."""
    planned = None
    if cfg.train.progress == "steps":
        planned = sum(schedule.accumulate(step / cfg.train.max_steps) for step in range(cfg.train.max_steps))
    setting = f"data.max_tokens={cfg.data.max_tokens}" if cfg.data.max_tokens is not None else "the whole corpus"
    return DataRepeats(training_rows, sequences, planned, setting)


def build_run(cfg, dist: Distributed, start: RunStart) -> Run:
    """Set-up, outside the budget: settings and techniques, the prepared data (before any collective), the
    model, the optimizer, the microbatch, a resume, the run directory (its config.yaml recorded)."""
    started = time.perf_counter()
    settings = resolve_settings(cfg, dist.local_rank)
    techniques = build_techniques(cfg, RunContext(settings.device, settings.compile, settings.precision.name,
                                                  dist.world_size))
    torch.manual_seed(cfg.train.seed)
    prepare_device(settings.device)
    handoff = NodeHandoff(Path(cfg.cache_dir), dist)
    preparing = time.perf_counter()
    dataset = _prepared_dataset(cfg, handoff)  # before the collective part: it may take hours
    data_s = time.perf_counter() - preparing
    dist.join(settings.device)
    handoff.remove()
    check_technique_inputs(cfg)  # again on the data now prepared (a teacher's tokenizer), before the run folder exists
    see_data(techniques, dataset)  # e.g. the unigram bias's counts
    vocab_size, seq_length = dataset.meta["vocab_size"], dataset.seq_length
    tokenizer = as_transformers_tokenizer(load_tokenizer(dataset.tokenizer_path), seq_length)

    checkpoint = saved = None
    if cfg.resume:  # the model this run trains must fit the checkpoint's weights before it is given memory
        checkpoint = resolve_checkpoint(cfg.resume, Path(cfg.output_dir) / cfg.name, key="resume", need_state=True)
        saved = load_state(checkpoint)
        check_resumed_model(checkpoint, saved, cfg, vocab_size)
    model = build_mlm_model(cfg.arch, vocab_size).to(settings.device)
    prepare_model(techniques, model)  # e.g. activation checkpointing, fp8
    optimizer = wrap_optimizer(techniques, build_pretraining_optimizer(model, cfg.train.optim))  # e.g. offload
    scaler = settings.precision.grad_scaler()
    searched = time.perf_counter()
    settings, microbatch_source = choose_microbatch(cfg, settings, dist, model, vocab_size, seq_length, saved,
                                                    extra_memory(techniques, model))
    setup_parts = {"data_s": data_s, "microbatch_search_s": time.perf_counter() - searched}
    fingerprint = resume_fingerprint(cfg, settings.microbatch_size, dist.world_size)
    progress = Progress()
    if checkpoint:
        progress = restore(checkpoint, saved, fingerprint, cfg.resume, model, optimizer, scaler, settings.device)
        log.info("resuming %s at step %d, %s of budget used", checkpoint, progress.step,
                 format_duration(progress.elapsed))
    run_dir = run_directory(cfg, dist, checkpoint, progress)
    if dist.is_main:
        start.directory = run_dir
        record_config(run_dir, cfg, earlier_run=run_of(checkpoint) if checkpoint else None)  # appended
    run_provenance = {**provenance(settings.device), "dataset": dataset.path.name,
                      "config_sha256": config_sha256(OmegaConf.to_container(cfg, resolve=True))}
    present = device_profile(settings)
    wall_budget = budget_seconds(cfg.budget, cfg.budget_scaling, settings.profile, present)
    wall_budget /= dist.world_size  # GPU-hours: N GPUs get 1/N of the wall time
    flops_per_token = training_flops_per_token(cfg.arch, vocab_size, seq_length, cfg.train.mlm_rate)
    return Run(cfg, dist, settings, microbatch_source, techniques, dataset, tokenizer, model, optimizer, scaler,
               fingerprint, progress, checkpoint, saved, run_dir, run_provenance, present, wall_budget,
               flops_per_token, started, setup_parts)


def train_run(run: Run, callbacks: list[Callback], zero_shot: Callable | None, start: RunStart) -> Trained:
    """Wire the run's components to the loop's named points, train under the budget clock, leave the record."""
    cfg, dist, settings, progress, run_dir = run.cfg, run.dist, run.settings, run.progress, run.run_dir
    dataset, tokenizer, model, techniques = run.dataset, run.tokenizer, run.model, run.techniques
    if settings.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(settings.device)  # the peak of training, not of the search

    clock = BudgetClock(run.wall_budget, progress.elapsed, time_source(progress))
    nonfinite = NonFiniteSteps(cfg.train.max_nonfinite_steps, cfg.train.check_nonfinite_every, settings.device,
                               progress)
    state = TrainState(model=model, optimizer=run.optimizer, progress=progress, clock=clock, run_dir=run_dir,
                       device=settings.device, tokenizer=tokenizer, nonfinite=nonfinite)
    sequences = settings.microbatch_size * dist.world_size  # per global microbatch
    microbatches = Microbatches(dataset, settings.microbatch_size, dist.rank, dist.world_size,
                                cfg.train.mlm_rate, cfg.train.seed)
    stream = data_stream(techniques, microbatches, progress.microbatches, settings.num_workers,
                         pin_memory=settings.device.type == "cuda")
    stopping = StoppingRule(cfg.train.progress, cfg.train.max_steps, clock)
    schedule = Schedule(cfg.train, sequences)
    agreement = rank_agreement(stopping, dist, cfg.train.check_nonfinite_every, settings.device, schedule.accumulate)
    validation = _validation(cfg, dataset, tokenizer, settings, dist, agreement, zero_shot)
    wandb = logger = None
    if dist.is_main:
        wandb = WandbLogger(cfg, run_dir)
        metrics = MetricsLog(run_dir / "metrics.jsonl", progress.step if cfg.resume else None, progress.tokens,
                             run.flops_per_token, run.present.peak_tflops)
        logger = MetricsLogger(metrics, cfg.logging.every_steps, cfg.logging.every_fraction, sequences,
                               TelemetrySampler(settings.device).start(), wandb, settings.device,
                               cfg.train.optim.grad_clip,
                               pauses_left=validation[0].expected_left_s if validation else lambda: 0.0)
    repeats = [_data_repeats(cfg, len(microbatches.rows), sequences, schedule)] if dist.is_main else []
    # techniques, then the validation curve, then the record of both; their state rides in checkpoints
    recorded = CallbackList([*techniques, *callbacks, *validation, *repeats, *([logger] if logger else [])])
    if run.saved:
        recorded.load_state_dict(run.saved.get("callbacks", {}))
    checkpointer = Checkpointer(cfg.checkpoint, tokenizer, run.scaler, run.fingerprint, recorded, dist.is_main,
                                run.provenance, last_good=run.checkpoint, progress=cfg.train.progress)
    heartbeat = [Heartbeat(run_dir)] if dist.is_main else []
    # the plots' redraw after the checkpointer, whose newest checkpoint it follows
    plots = [PlotRefresh(lambda: checkpointer.newest)] if dist.is_main and cfg.logging.plots else []
    bar = [ProgressBar(logger, stopping)] if dist.is_main and use_bar(cfg.logging.progress) else []
    callbacks = CallbackList([*recorded.callbacks, *bar, *heartbeat, checkpointer, *plots])
    step = Step(_network(model, settings, dist), run.optimizer, run.scaler, settings.precision, stream,
                points=step_points(callbacks.callbacks), grad_clip=cfg.train.optim.grad_clip, dist=dist)

    stop_reason, summary = "error", None
    start.done()
    loop_began, loop_ended = time.perf_counter(), None
    try:
        # Ctrl-C / SIGTERM: stop after the step with a checkpoint, then leave the run's record; a second signal,
        # while training or while the record is written, exits at once
        with stopping.interrupt:
            try:
                with logging_redirect_tqdm() if bar else contextlib.nullcontext():  # log lines above a progress bar
                    stop_reason = run_loop(state, step, agreement, schedule, callbacks,
                                           sequences * dataset.seq_length)
                loop_ended = time.perf_counter()
                _release_network(step)
                dist.leave()  # the last collective is behind: rank 0's record (plots, summary) waits for no one
            except (NonFiniteLossError, NonFiniteWeightsError) as error:
                stop_reason = "non-finite"
                checkpointer.discard_unconfirmed()
                raise type(error)(f"{error}; {resume_advice(checkpointer.last_good)}") from None
            except KeyboardInterrupt:
                stop_reason = "interrupted"
                raise
            except (WriteFailed, OSError):  # a full disk: the one line names the write that failed first
                stop_reason = "write failed"
                raise
            finally:  # however training ended, leave its record (rank 0), unless writing is what failed
                for progress_bar in bar:
                    progress_bar.close()
                if dist.is_main and stop_reason != "write failed":
                    after_loop = time.perf_counter() - (loop_ended or time.perf_counter())  # 0 if the loop raised
                    outside_parts = {**run.setup_parts, "setup_s": loop_began - run.started,
                                     "after_training_s": after_loop}
                    summary = leave_record(RunFacts(
                        records=[], stop_reason=stop_reason, progress=vars(progress), budget_hours=cfg.budget,
                        wall_budget=clock.budget_seconds, session_training_s=progress.elapsed - clock.elapsed_before,
                        session_wall_s=time.perf_counter() - run.started, first_steps=logger.first_steps,
                        peak_memory=peak_memory_gb(settings.device), energy_wh=None,
                        flops_per_token=run.flops_per_token, peak_tflops=run.present.peak_tflops,
                        provenance=run.provenance,
                        microbatch={"size": settings.microbatch_size, "source": run.microbatch_source},
                        held_out_rows=dataset.held_out_rows, validation_s=clock.paused_seconds,
                        stop_detail=stopping.early_stop, step_timing=step.timing, outside_parts=outside_parts),
                        run_dir, logger, wandb, cfg.logging.plots)
        if stop_reason == "interrupted":
            written = f"checkpoint {checkpointer.newest}" if checkpointer.newest else "no checkpoint yet"
            raise Interrupted(f"stopped at step {progress.step}; {written}; to go on, run the same command with "
                              f"resume={run_dir}", stopping.interrupt.signum)
        if stopping.early_stop:
            log.warning("stopped early: %s", stopping.early_stop)
        log.info("done: %d steps, %s tokens, %s of training, %d non-finite steps skipped; final checkpoint %s",
                 progress.step, f"{progress.tokens:,}", format_duration(progress.elapsed),
                 progress.nonfinite_total, run_dir / "checkpoints" / FINAL)
    except BaseException:
        if wandb is not None:
            wandb.finish(failed=True)
        raise
    return Trained(run_dir, dist.is_main, stop_reason, summary, wandb)


def _validation(cfg, dataset: PreparedDataset, tokenizer, settings: Settings, dist: Distributed,
                agreement: LocalAgreement, zero_shot: Callable | None) -> list[Callback]:
    """The validation curve (and the zero-shot probe with it), where the dataset holds rows out for it."""
    if not dataset.held_out_rows:
        log.info("validation: off (data.validation_rows=0)")
        return []
    rule = cfg.train.validation
    early = (rule.early_stop_fraction, rule.early_stop_loss) if rule.early_stop_fraction is not None else None
    log.info("validation: %d held-out rows, at %s of training and at the end%s", dataset.held_out_rows,
             ", ".join(f"{100 * f:.0f}%" for f in rule.fractions) or "none",
             f"; early stop above loss {early[1]} from {100 * early[0]:.0f}%" if early else "")
    probe = None
    if rule.zero_shot:
        probe = zero_shot(dataset, tokenizer, rule.blimp_pairs, rule.bits_rows)
        log.info("zero-shot at each validation: %s (train.validation.zero_shot=false turns it off)", probe.describe())
    return [Validation(dataset, cfg.train.mlm_rate, settings.precision, dist, agreement, list(rule.fractions), early,
                       probe)]


def _release_network(step: Step) -> None:
    """Let the step's network go before the ranks leave the group. Under torchrun it is DDP, whose reducer holds
    the process group: destroyed from there, gloo's group waits for its worker threads with the GIL held while a
    worker may need the GIL to free a finished collective's tensors, and the rank hangs at its end (seen once in
    the suite, on rank 1). Released here (collected at once, even inside a reference cycle), the group's last
    reference is dropped by dist.leave(), from Python, which releases the GIL first."""
    step.network = None
    gc.collect()


def _prepared_dataset(cfg, handoff: NodeHandoff) -> PreparedDataset:
    """Data preparation is outside the budget. Under torchrun each machine's local rank 0 builds (or checks)
    it and hands its directory to the other ranks, which wait outside any collective."""

    def prepare() -> str:
        dataset, reused = prepare_dataset(cfg.data, cfg.cache_dir)
        log.info("data: %s (%s, %d rows)", dataset.path, "cached" if reused else "prepared", dataset.num_rows)
        return str(dataset.path)

    return PreparedDataset.open(handoff.run(prepare, "preparing the data"))


def _network(model: torch.nn.Module, settings: Settings, dist: Distributed) -> torch.nn.Module:
    """The model as the step runs it: wrapped by DDP under torchrun, compiled where the profile says so."""
    network = model
    if dist.enabled:
        device_ids = [settings.device.index] if settings.device.type == "cuda" else None
        network = torch.nn.parallel.DistributedDataParallel(model, device_ids=device_ids)
    return torch.compile(network) if settings.compile else network
