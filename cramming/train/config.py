"""Typed schemas of the Hydra group `train` and of the other sections training reads (impl, checkpoint, logging,
wandb), each checking its own values (`check`); pretrain.py's top level, which holds them with the model, the data
and the end-of-run GLUE, is cramming.pretraining's. The keys a training technique or an optimizer owns are
declared in its own file (`settings`: cramming.train.techniques, cramming.train.optimizers) and added here to the
section they live in, so a new plug-in brings its keys, and its rules, without a line in this file."""

import math
from dataclasses import dataclass, field
from typing import Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

from cramming.engine.schedules import CLIP_SCHEDULES, check_lr_schedule
from cramming.errors import problems_of, raise_problems, require
from cramming.train.optimizers import OPTIMIZERS
from cramming.train.techniques import TECHNIQUES

WANDB_MODES = ("disabled", "offline", "online")
WANDB_FORBIDDEN = "/\\#?%:"  # characters W&B refuses in a project name (it allows at most 128 characters)


def with_plugin_keys(schema: type, section: str) -> type:
    """`schema` with the keys its plug-ins read directly under `section`: the optimizers' hyperparameters (null by
    default) first, then the techniques' settings."""
    return OPTIMIZERS.schema(schema, section, TECHNIQUES)


@dataclass
class OptimConfig:
    """The optimizer (cramming.train.optimizers), a config group: `optim=<name>` (or `train.optim.name=<name>`)
    composes configs/optim/<name>.yaml, its name and its defaults (adamw's are the crammed recipe's: lr 1e-3,
    betas (0.9, 0.98), eps 1e-12, weight decay 0.01). A hyperparameter the optimizer reads must be set, one it
    does not read must stay null. Techniques add their own keys here."""

    name: str = "adamw"  # one of OPTIMIZERS (cramming.train.optimizers), each with its configs/optim/<name>.yaml
    # the hyperparameters (lr, betas, eps, weight_decay, momentum, ...) are the optimizers' settings, added below
    decay_embeddings: bool = True  # false: no weight decay on embedding tables either
    grad_clip: Optional[float] = 0.5  # max global gradient norm; null disables
    clip_schedule: str = "constant"  # constant: grad_clip throughout | lr: grad_clip x the lr's multiplier at f

    def check(self) -> None:
        """The optimizer known, the keys it reads set and the others null, and each value in its domain: every
        problem."""
        raise_problems(problems_of(
            lambda: OPTIMIZERS.named(self.name),
            lambda: OPTIMIZERS.check(self),  # each optimizer's own rules
            self._check_values))

    def _check_values(self) -> None:
        """The values set (a key left null is the optimizer's rule above)."""
        require([
            (self.lr is None or (math.isfinite(self.lr) and self.lr > 0),
             f"train.optim.lr={self.lr} must be positive and finite"),
            (self.betas is None or (len(self.betas) == 2 and all(0 <= beta < 1 for beta in self.betas)),
             f"train.optim.betas={list(self.betas or [])} must be two numbers in [0, 1)"),
            (self.eps is None or self.eps > 0, f"train.optim.eps={self.eps} must be positive"),
            (self.momentum is None or 0 <= self.momentum < 1,
             f"train.optim.momentum={self.momentum} must be in [0, 1)"),
            (self.weight_decay is None or self.weight_decay >= 0,
             f"train.optim.weight_decay={self.weight_decay} must not be negative"),
            (self.grad_clip is None or self.grad_clip > 0,
             f"train.optim.grad_clip={self.grad_clip} must be positive (or null: no clipping)"),
            (self.clip_schedule in CLIP_SCHEDULES,
             f"train.optim.clip_schedule={self.clip_schedule!r} is unknown; choose one of {', '.join(CLIP_SCHEDULES)}"),
            (self.clip_schedule == "constant" or self.grad_clip is not None,
             f"train.optim.clip_schedule={self.clip_schedule} scales train.optim.grad_clip, which is null"),
        ])


OptimConfig = with_plugin_keys(OptimConfig, "train.optim")


@dataclass
class ValidationConfig:
    """The validation curve on the dataset's held-out rows (data.validation_rows; 0 turns it off)."""

    fractions: list[float] = field(default_factory=lambda: [0.25, 0.5, 0.75])  # of training; and at the end
    # Early termination (off by default), as the paper discarded bad runs: stop a run whose validation loss
    # at or after this fraction of training is above early_stop_loss. Both set, or neither.
    early_stop_fraction: Optional[float] = None
    early_stop_loss: Optional[float] = None
    # Zero-shot quality at each validation, off the budget clock (cramming.eval.probe, docs/zero_shot.md): BLiMP on
    # the first blimp_pairs pairs of each paradigm of the packaged subset (1-100) and the bits per character of
    # the first bits_rows held-out rows. Its time is fixed by these sizes: about 11 s a validation for the tiny
    # model on two CPU cores at 50 pairs (the quick start takes 10: 2.5 s), seconds for crammed-bert on a GPU.
    zero_shot: bool = True
    blimp_pairs: int = 50
    bits_rows: int = 16

    def check(self) -> None:
        fraction, loss, fractions = self.early_stop_fraction, self.early_stop_loss, list(self.fractions)
        require([
            (1 <= self.blimp_pairs <= 100,
             f"train.validation.blimp_pairs={self.blimp_pairs} must be in [1, 100] (the packaged subset's pairs per "
             "paradigm)"),
            (self.bits_rows >= 1,
             f"train.validation.bits_rows={self.bits_rows} must be at least 1"),
            (all(0 < f < 1 for f in fractions),
             f"train.validation.fractions={fractions} must each be in (0, 1) (the end is always validated)"),
            (all(a < b for a, b in zip(fractions, fractions[1:])),
             f"train.validation.fractions={fractions} must be increasing, each once: a validation is at one point "
             f"of training (e.g. {sorted(set(fractions))})"),
            ((fraction is None) == (loss is None),
             "train.validation.early_stop_fraction and train.validation.early_stop_loss go together: set both or "
             "neither"),
            (fraction is None or fraction in fractions,
             f"train.validation.early_stop_fraction={fraction} must be one of train.validation.fractions={fractions} "
             "(the check runs at a validation)"),
            (loss is None or (math.isfinite(loss) and loss > 0),
             f"train.validation.early_stop_loss={loss} must be positive and finite"),
        ])


@dataclass
class TrainConfig:
    name: str = MISSING
    optim: OptimConfig = field(default_factory=OptimConfig)
    # lr multiplier of the progress fraction f (cramming.engine.schedules.lr_multiplier): triangle = min(0.25 + f,
    # 4 - 4f) (the crammed recipe), constant, linear (1 - f), cosine (warm-up over warmup_fraction, then to
    # 0), wsd, one-cycle, inverse-sqrt
    lr_schedule: str = "triangle"
    warmup_fraction: float = 0.1  # cosine, wsd, one-cycle and inverse-sqrt
    # progress f is the elapsed fraction of the time budget ("budget") or of max_steps ("steps")
    progress: str = "budget"
    max_steps: Optional[int] = None  # required with progress=steps; also a hard stop with progress=budget
    batch_size: int = 8192  # sequences per optimizer step once the ramp is done
    batch_ramp_fraction: float = 0.6  # the batch grows linearly from one microbatch to batch_size until this f
    # a floor on the optimizer steps of a budget run: the final batch is at most the run's expected sequences /
    # min_steps (cramming.engine.schedules.fitted_batch_size); null: always batch_size (the crammed recipe)
    min_steps: Optional[int] = None
    # the peak lr x (batch_size / the final batch)^lr_batch_exponent: where min_steps caps the final batch below
    # batch_size (short budgets), a higher peak; at batch_size (a day's budget, or min_steps null) the lr as set
    lr_batch_exponent: float = 0.0
    mlm_rate: float = 0.25
    seed: int = 0
    max_nonfinite_steps: int = 10  # stop after this many non-finite losses in a row
    # how often (in steps) the host reads what it left on the device: the non-finite counts and, under torchrun,
    # the ranks' agreed clock and stop requests (cramming.train.stopping); each read waits for the GPU
    check_nonfinite_every: int = 10
    validation: ValidationConfig = field(default_factory=ValidationConfig)

    def check(self) -> None:
        """Its own values and its parts' (the optimizer, validation, the schedule): every problem; the techniques'
        are theirs."""
        raise_problems(problems_of(self._check_values, self.optim.check, self.validation.check,
                                   lambda: check_lr_schedule(self.lr_schedule)))

    def _check_values(self) -> None:
        require([
            (self.progress in ("budget", "steps"), f"train.progress={self.progress!r} must be budget or steps"),
            (self.progress != "steps" or self.max_steps, "train.progress=steps needs train.max_steps"),
            (self.max_steps is None or self.max_steps >= 1, f"train.max_steps={self.max_steps} must be positive"),
            (0 <= self.warmup_fraction < 1, f"train.warmup_fraction={self.warmup_fraction} must be in [0, 1)"),
            (self.batch_size >= 1, f"train.batch_size={self.batch_size} must be at least 1"),
            (self.min_steps is None or self.min_steps >= 1,
             f"train.min_steps={self.min_steps} must be at least 1 (or null: the final batch is train.batch_size)"),
            (0 <= self.batch_ramp_fraction <= 1,
             f"train.batch_ramp_fraction={self.batch_ramp_fraction} must be in [0, 1]"),
            (0 <= self.lr_batch_exponent <= 1,
             f"train.lr_batch_exponent={self.lr_batch_exponent} must be in [0, 1] (0: the lr as set)"),
            (self.max_nonfinite_steps >= 1, f"train.max_nonfinite_steps={self.max_nonfinite_steps} must be at least 1"),
            (self.check_nonfinite_every >= 1,
             f"train.check_nonfinite_every={self.check_nonfinite_every} must be at least 1"),
        ])


TrainConfig = with_plugin_keys(TrainConfig, "train")


@dataclass
class CheckpointConfig:
    interval_minutes: float = 30.0  # wall-clock minutes between checkpoints (and one at the end)
    keep_last: int = 2  # step checkpoints kept besides `final`
    # progress fractions after which a checkpoint `at-<f>-step-<n>` is written and never pruned (e.g. the
    # early weights a lottery ticket rewinds to: train.sparsity.rewind)
    keep_at: list[float] = field(default_factory=list)

    def check(self) -> None:
        require([
            (math.isfinite(self.interval_minutes) and self.interval_minutes > 0,
             f"checkpoint.interval_minutes={self.interval_minutes} must be positive"),
            (self.keep_last >= 0, f"checkpoint.keep_last={self.keep_last} must not be negative"),
            (all(0 <= f < 1 for f in self.keep_at),
             f"checkpoint.keep_at={list(self.keep_at)} must hold progress fractions in [0, 1)"),
        ])


@dataclass
class LoggingConfig:
    every_steps: int = 10  # optimizer steps between console lines and metrics.jsonl records
    # ... and a record at least every this fraction of training (steps, or the budget clock): a short run
    # still draws a curve
    every_fraction: float = 0.02
    # console: auto (a progress bar on a terminal, plain lines otherwise) | bar | lines; the log file
    # always gets the lines
    progress: str = "auto"
    # plots/*.png, redrawn with a checkpoint and at the end (about a second of drawing each time); false leaves
    # them out, for sweeps of many short runs (metrics.jsonl holds every curve: scripts/plot_runs.py)
    plots: bool = True

    def check(self) -> None:
        require([
            (self.every_steps >= 1, f"logging.every_steps={self.every_steps} must be at least 1"),
            (0 < self.every_fraction <= 1, f"logging.every_fraction={self.every_fraction} must be in (0, 1]"),
            (self.progress in ("auto", "bar", "lines"),
             f"logging.progress={self.progress!r} must be auto, bar or lines"),
        ])


@dataclass
class ImplConfig:
    """Execution settings; null takes the GPU profile's default."""

    # null: automatic: on a GPU the largest microbatch that fits (searched once, cached), on the CPU the
    # profile's microbatch_size; a resumed run keeps its checkpoint's microbatch
    microbatch_size: Optional[int] = None
    compile: Optional[bool] = None
    precision: Optional[str] = None
    num_workers: Optional[int] = None
    # true: two runs on the same machine are bit-identical (deterministic kernels, cuBLAS workspace, the math
    # attention backend); needs train.progress=steps. Slower: see docs/training.md
    deterministic: bool = False

    def check(self) -> None:
        require([
            (self.microbatch_size is None or self.microbatch_size >= 1,
             f"impl.microbatch_size={self.microbatch_size} must be positive (or null: automatic)"),
            (self.num_workers is None or self.num_workers >= 0,
             f"impl.num_workers={self.num_workers} must not be negative"),
        ])


ImplConfig = with_plugin_keys(ImplConfig, "impl")


@dataclass
class WandbConfig:
    """Weights & Biases logging (rank 0): disabled, offline (no account; `wandb sync` later) or online."""

    mode: str = "disabled"
    project: str = "cramming"
    entity: Optional[str] = None  # null: the account's default entity
    # wandb=online when W&B's server does not answer at the start (a 3-second probe, before any data is prepared):
    # offline logs to <run>/wandb/ and says so (`wandb sync` later) | error refuses the run
    if_unreachable: str = "offline"

    def check(self) -> None:
        """Rejected before any work is done, not after data preparation."""
        forbidden = sorted(set(self.project) & set(WANDB_FORBIDDEN))
        require([(self.mode in WANDB_MODES, f"wandb.mode={self.mode!r} must be one of {', '.join(WANDB_MODES)}"),
                 (self.if_unreachable in ("offline", "error"),
                  f"wandb.if_unreachable={self.if_unreachable!r} must be offline or error"),
                 (0 < len(self.project) <= 128 and not forbidden,
                  f"wandb.project={self.project!r} is not a W&B project name: 1 to 128 characters, none of "
                  f"{' '.join(WANDB_FORBIDDEN)}{f' (it has {forbidden[0]})' if forbidden else ''}")])


ConfigStore.instance().store(group="train", name="schema", node=TrainConfig)
ConfigStore.instance().store(group="wandb", name="schema", node=WandbConfig)
