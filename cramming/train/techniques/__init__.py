"""The training techniques a run switches on by config, one file each (base.py says what a Technique is).

Adding one: its file (the Technique subclass with its config dataclass, `check`, `conflicts`, `build` and the
events it needs), one line in TECHNIQUES, its config field in train/config.py, a YAML, a test and a
paragraph in docs/ablations.md. The order of TECHNIQUES is the order the trainer calls them in: a loss
changed by one (importance weights) is what the next (distillation) changes further; model surgery runs in
this order too (activation checkpointing before fp8's conversion).
"""

import logging

import torch

from cramming.data.stream import Microbatches, microbatch_stream
from cramming.errors import CrammingError
from cramming.train.speed_notices import log_speed_notices
from cramming.train.techniques.activation_checkpointing import ActivationCheckpointing
from cramming.train.techniques.base import RunContext, Technique
from cramming.train.techniques.distillation import Distillation
from cramming.train.techniques.ema import Ema
from cramming.train.techniques.fp8 import Fp8
from cramming.train.techniques.importance_sampling import ImportanceSampling
from cramming.train.techniques.layer_drop import LayerDrop
from cramming.train.techniques.offload import OffloadOptimizer
from cramming.train.techniques.sam import SharpnessAware
from cramming.train.techniques.sophia import SophiaHessian
from cramming.train.techniques.sparsity import Sparsity
from cramming.train.techniques.stacking import Stacking
from cramming.train.step import TrainStep

log = logging.getLogger("pretrain")

TECHNIQUES: tuple[type[Technique], ...] = (
    SophiaHessian,
    ImportanceSampling,
    Sparsity,
    Distillation,
    LayerDrop,
    Stacking,
    SharpnessAware,
    Ema,
    ActivationCheckpointing,
    Fp8,
    OffloadOptimizer,
)


def check_techniques(cfg) -> None:
    """Each technique's values, then no two enabled ones that conflict: one line naming the first problem."""
    for technique in TECHNIQUES:
        technique.check(cfg)
    enabled = {technique.__name__: technique for technique in TECHNIQUES if technique.enabled(cfg)}
    for technique in enabled.values():
        for other, why in technique.conflicts.items():
            if other in enabled:
                raise CrammingError(f"{technique.label} and {enabled[other].label} {why}")


def check_on_device(cfg, device: torch.device, compiled: bool, precision: str, world_size: int) -> None:
    """The precision options' checks on this device (fp8, adamw8bit, offload), first of all, and the speed
    notices of the GPU options measured slower than the default."""
    run = RunContext(device, compiled, precision, world_size)
    for technique in (Fp8, OffloadOptimizer):
        if technique.enabled(cfg):
            technique.check_on_device(cfg, run)
    if cfg.train.optim.name == "adamw8bit" and device.type != "cuda":
        raise CrammingError(f"train.optim.name=adamw8bit (torchao's 8-bit AdamW states) needs a CUDA GPU; this run "
                            f"is on {device.type}: use train.optim.name=adamw")
    log_speed_notices(cfg, device)


def build_techniques(cfg, run: RunContext) -> list[Technique]:
    """The enabled techniques, in TECHNIQUES' order, each after the checks that need the run's settings."""
    check_on_device(cfg, run.device, run.compile, run.precision, run.world_size)
    return [technique.build(cfg, run) for technique in TECHNIQUES if technique.enabled(cfg)]


def prepare_model(techniques: list[Technique], model: torch.nn.Module) -> None:
    for technique in techniques:
        technique.on_model(model)


def wrap_optimizer(techniques: list[Technique], optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
    for technique in techniques:
        optimizer = technique.wrap_optimizer(optimizer)
    return optimizer


def data_stream(techniques: list[Technique], microbatches: Microbatches, start: int, num_workers: int,
                pin_memory: bool):
    """The microbatches from global microbatch `start` on: drawn by a technique that draws them (importance
    sampling), else the prepared order."""
    for technique in techniques:
        stream = technique.stream(microbatches, start)
        if stream is not None:
            return stream
    return microbatch_stream(microbatches, start, num_workers, pin_memory)


def step_class(techniques: list[Technique]):
    """The step the trainer builds: TrainStep, or what a technique makes of it (SAM's two passes)."""
    step = TrainStep
    for technique in techniques:
        step = technique.wrap_step(step)
    return step


def extra_memory(techniques: list[Technique], model: torch.nn.Module) -> int:
    return sum(technique.extra_memory(model) for technique in techniques)
