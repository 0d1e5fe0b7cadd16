"""Typed schemas of the Hydra group `train` and of `pretrain.py`'s top level."""

from dataclasses import dataclass, field
from typing import Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

from cramming.data.config import DataConfig
from cramming.eval.config import GlueConfig
from cramming.model.config import ModelConfig
from cramming.hardware import GpuProfile
from cramming.train.techniques.distillation import DistillConfig
from cramming.train.techniques.ema import EmaConfig
from cramming.train.techniques.layer_drop import LayerDropConfig
from cramming.train.techniques.sparsity import SparsityConfig
from cramming.train.techniques.stacking import StackingConfig


@dataclass
class OptimConfig:
    """The optimizer (cramming.train.optimizers). A null hyperparameter takes the optimizer's default from
    configs/optim/<name>.yaml (adamw's are the crammed recipe's: lr 1e-3, betas (0.9, 0.98), eps 1e-12,
    weight decay 0.01); one the optimizer does not read must stay null."""

    name: str = "adamw"  # adamw | lamb | lion | sgd-nesterov | adafactor | muon | sophia | adamw8bit (CUDA)
    lr: Optional[float] = None
    betas: Optional[tuple[float, float]] = None
    eps: Optional[float] = None
    weight_decay: Optional[float] = None  # on matrices only: never norms, biases or scalars
    momentum: Optional[float] = None  # sgd-nesterov, muon
    gamma: Optional[float] = None  # sophia: the scale of its Hessian-clipped update
    hessian_every: Optional[int] = None  # sophia: steps between Hessian estimates
    decay_embeddings: bool = True  # false: no weight decay on embedding tables either
    grad_clip: Optional[float] = 0.5  # max global gradient norm; null disables
    # > 0: sharpness-aware minimization around the optimizer (cramming.train.techniques.sam): each step's gradient is
    # taken again at the weights moved by sam_rho along the normalized gradient; two passes per step
    sam_rho: float = 0.0


@dataclass
class ValidationConfig:
    """The validation curve on the dataset's held-out rows (data.validation_rows; 0 turns it off)."""

    fractions: list[float] = field(default_factory=lambda: [0.25, 0.5, 0.75])  # of training; and at the end
    # Early termination (off by default), as the paper discarded bad runs: stop a run whose validation loss
    # at or after this fraction of training is above early_stop_loss. Both set, or neither.
    early_stop_fraction: Optional[float] = None
    early_stop_loss: Optional[float] = None


@dataclass
class TrainConfig:
    name: str = MISSING
    optim: OptimConfig = field(default_factory=OptimConfig)
    # lr multiplier of the progress fraction f (cramming.runtime.lr_multiplier): triangle = min(0.25 + f,
    # 4 - 4f) (the crammed recipe), constant, linear (1 - f), cosine (warm-up over warmup_fraction, then to
    # 0), wsd, one-cycle, inverse-sqrt
    lr_schedule: str = "triangle"
    warmup_fraction: float = 0.1  # cosine, wsd, one-cycle and inverse-sqrt
    # progress f is the elapsed fraction of the time budget ("budget") or of max_steps ("steps")
    progress: str = "budget"
    max_steps: Optional[int] = None  # required with progress=steps; also a hard stop with progress=budget
    batch_size: int = 8192  # sequences per optimizer step once the ramp is done
    batch_ramp_fraction: float = 0.6  # the batch grows linearly from one microbatch to batch_size until this f
    mlm_rate: float = 0.25
    seed: int = 0
    max_nonfinite_steps: int = 10  # stop after this many non-finite losses in a row
    # how often (in steps) the host reads what it left on the device: the non-finite counts and, under torchrun,
    # the ranks' agreed clock and stop requests (cramming.train.stopping); each read waits for the GPU
    check_nonfinite_every: int = 10
    validation: ValidationConfig = field(default_factory=ValidationConfig)
    # sequential: the prepared data order | importance: rows drawn by their last-seen loss, importance-
    # weighted (cramming.train.techniques.importance_sampling)
    sampling: str = "sequential"
    layer_drop: LayerDropConfig = field(default_factory=LayerDropConfig)
    stacking: StackingConfig = field(default_factory=StackingConfig)
    distill: DistillConfig = field(default_factory=DistillConfig)
    sparsity: SparsityConfig = field(default_factory=SparsityConfig)
    ema: EmaConfig = field(default_factory=EmaConfig)


@dataclass
class CheckpointConfig:
    interval_minutes: float = 30.0  # wall-clock minutes between checkpoints (and one at the end)
    keep_last: int = 2  # step checkpoints kept besides `final`
    # progress fractions after which a checkpoint `at-<f>-step-<n>` is written and never pruned (e.g. the
    # early weights a lottery ticket rewinds to: train.sparsity.rewind)
    keep_at: list[float] = field(default_factory=list)


@dataclass
class LoggingConfig:
    every_steps: int = 10  # optimizer steps between console lines and metrics.jsonl records
    # ... and a record at least every this fraction of training (steps, or the budget clock): a short run
    # still draws a curve
    every_fraction: float = 0.02
    # console: auto (a progress bar on a terminal, plain lines otherwise) | bar | lines; the log file
    # always gets the lines
    progress: str = "auto"


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
    # true: each layer's activations are recomputed in the backward pass instead of kept (less memory, about a
    # third more compute; the GPU microbatch search then finds a larger microbatch)
    activation_checkpointing: bool = False
    # true: the encoder layers' Linear layers compute in float8 (torchao; cramming.train.low_precision); needs
    # an NVIDIA GPU of compute capability 8.9+ (Ada, Hopper) and compile; anywhere else a one-line error
    fp8: bool = False
    # true: optimizer state and master weights in CPU memory, the update on the CPU (torchao's
    # CPUOffloadOptimizer; one GPU, not fp16); a no-op with a notice on a CPU-only run
    offload_optimizer: bool = False


@dataclass
class WandbConfig:
    """Weights & Biases logging (rank 0): disabled, offline (no account; `wandb sync` later) or online."""

    mode: str = "disabled"
    project: str = "cramming"
    entity: Optional[str] = None  # null: the account's default entity


@dataclass
class PretrainConfig:
    """Top level of `pretrain.py`."""

    name: str = "${arch.name}"  # the run's directory: <output_dir>/<name>/<timestamp>
    budget: float = 24.0  # GPU-hours; under torchrun the wall-clock budget is budget / world size
    budget_scaling: str = "none"  # none | peak: run for the time that matches the profile's peak FLOPs x budget
    resume: Optional[str] = None  # a checkpoint dir, a run dir, or "latest"
    output_dir: str = "outputs"
    cache_dir: str = "${oc.env:CRAMMING_CACHE,'~/.cache/cramming'}"
    arch: ModelConfig = MISSING
    data: DataConfig = MISSING
    train: TrainConfig = MISSING
    gpu: GpuProfile = MISSING
    impl: ImplConfig = field(default_factory=ImplConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    wandb: WandbConfig = MISSING
    eval: Optional[GlueConfig] = None  # eval=glue: fine-tune and score on GLUE after pretraining (outside the budget)


ConfigStore.instance().store(group="train", name="schema", node=TrainConfig)
ConfigStore.instance().store(group="wandb", name="schema", node=WandbConfig)
ConfigStore.instance().store(name="pretrain_schema", node=PretrainConfig)
