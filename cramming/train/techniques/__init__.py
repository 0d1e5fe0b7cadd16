"""The training techniques a run switches on by config, one file each (base.py says what a Technique declares),
and the registry everything else asks: the config schema (their settings), the checks, the trainer (the set-up
events), the microbatch search, the checkpointer and the benchmark. None of those names a technique.

Adding one: its file (the Technique subclass and its settings), one line in the registry TECHNIQUES
(cramming.plugins.Registry), a test, a sweep row and a paragraph in docs/ablations.md. The order of TECHNIQUES is
the order the trainer calls them in: a loss changed by one (importance weights) is what the next (distillation)
changes further; model surgery runs in this order too (activation checkpointing before fp8's conversion); step
wrappers stack in it.
"""

import functools
import logging

import torch

from cramming.data.store import PreparedDataset
from cramming.data.stream import Microbatches, microbatch_stream
from cramming.errors import problems_of, raise_problems
from cramming.plugins import Registry
from cramming.train.optimizers import OPTIMIZERS
from cramming.train.techniques.activation_checkpointing import ActivationCheckpointing
from cramming.train.techniques.base import RunContext, Technique
from cramming.train.techniques.distillation import Distillation
from cramming.train.techniques.ema import Ema
from cramming.train.techniques.fp8 import Fp8
from cramming.train.techniques.importance_sampling import ImportanceSampling
from cramming.train.techniques.layer_drop import LayerDrop
from cramming.train.techniques.mask_schedule import MaskSchedule
from cramming.train.techniques.offload import OffloadOptimizer
from cramming.train.techniques.sam import SharpnessAware
from cramming.train.techniques.sophia_hessian import SophiaHessian
from cramming.train.techniques.sparsity import Sparsity
from cramming.train.techniques.stacking import Stacking
from cramming.train.techniques.unigram_bias import UnigramBias
from cramming.train.techniques.z_loss import ZLoss

log = logging.getLogger("pretrain")

TECHNIQUES: Registry[type[Technique]] = Registry("benchmark.variants", (
    SophiaHessian,
    ImportanceSampling,
    MaskSchedule,
    Sparsity,
    Distillation,
    ZLoss,
    UnigramBias,
    LayerDrop,
    Stacking,
    SharpnessAware,
    Ema,
    ActivationCheckpointing,
    Fp8,
    OffloadOptimizer,
))

__all__ = ["TECHNIQUES", "RunContext", "Technique", "build_techniques", "check_on_device", "check_technique_inputs",
           "check_techniques", "fill_arch_needs",
           "data_stream", "extra_memory", "microbatch_key", "optimizer_state_parts", "prepare_model", "see_data",
           "variant_overrides", "wrap_optimizer"]


def check_techniques(cfg) -> None:
    """Each technique's values, and no two enabled ones that conflict: every problem."""
    enabled = {technique.name: technique for technique in TECHNIQUES if technique.enabled(cfg)}
    raise_problems(TECHNIQUES.problems(cfg) +
                   [f"{technique.override} and {enabled[other].override} {why}" for technique in enabled.values()
                    for other, why in technique.conflicts.items() if other in enabled])


def fill_arch_needs(cfg) -> None:
    """Set in cfg.arch what the enabled techniques need of it, where it is null (an explicit value stays, and
    their checks refuse one that contradicts them): the arch the run builds, records and checkpoints."""
    for technique in TECHNIQUES:
        if technique.enabled(cfg):
            for key, value in technique.arch_needs.items():
                if getattr(cfg.arch, key) is None:
                    setattr(cfg.arch, key, value)


def check_technique_inputs(cfg) -> None:
    """The enabled techniques' inputs on disk against this run's config, every problem."""
    raise_problems(problems_of(*[functools.partial(technique.check_inputs, cfg) for technique in TECHNIQUES
                                 if technique.enabled(cfg)]))


def check_on_device(cfg, device: torch.device, compiled: bool, precision: str, world_size: int) -> None:
    """What the enabled techniques and the optimizer need of this device, first of all set-up; then the notices
    of those measured slower than the default here, and of torchao's kernels where one of them relies on them."""
    run = RunContext(device, compiled, precision, world_size)
    enabled = [technique for technique in TECHNIQUES if technique.enabled(cfg)]
    for technique in enabled:
        technique.check_on_device(cfg, run)
    optimizer = OPTIMIZERS.by_name[cfg.train.optim.name]
    optimizer.check_on_device(device)
    if device.type != "cuda":
        return
    notices = [technique.speed_notice(cfg, device) for technique in enabled] + [optimizer.speed_notice]
    for notice in filter(None, notices):
        log.warning("%s", notice)
    if optimizer.uses_torchao_kernels or any(technique.uses_torchao_kernels for technique in enabled):
        kernels = torchao_kernels_notice()
        if kernels:
            log.warning("%s", kernels)


def torchao_kernels_notice() -> str | None:
    """torchao skips its compiled kernels (fp8 and low-bit ops) for a torch it was not built against, and
    says so only through its logger: one line naming both versions instead of a silent slowdown."""
    import torchao  # noqa: PLC0415 -- only when an option uses its kernels

    if not getattr(torchao, "skip_loading_so_files", False):
        return None
    return (f"torchao {torchao.__version__} skipped its compiled kernels for torch {torch.__version__} "
            f"({getattr(torchao, '_skip_reason', None) or 'no reason given'}): its options run without them; "
            "docs/reproduce.md lists the tested torch/torchao pairs")


def build_techniques(cfg, run: RunContext) -> list[Technique]:
    """The enabled techniques, in TECHNIQUES' order, each after the checks that need the run's settings."""
    check_on_device(cfg, run.device, run.compile, run.precision, run.world_size)
    return [technique.build(cfg, run) for technique in TECHNIQUES if technique.enabled(cfg)]


def see_data(techniques: list[Technique], dataset: PreparedDataset) -> None:
    for technique in techniques:
        technique.on_data(dataset)


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


def extra_memory(techniques: list[Technique], model: torch.nn.Module) -> int:
    return sum(technique.extra_memory(model) for technique in techniques)


def microbatch_key(cfg) -> dict:
    """What the enabled techniques change in a step's memory, for the microbatch cache's key."""
    return {key: value for technique in TECHNIQUES if technique.enabled(cfg)
            for key, value in technique.microbatch_key(cfg).items()}


def optimizer_state_parts(optimizer_state: dict) -> list[dict]:
    """The plain optimizer state dicts (with "state") an optimizer's state dict holds: itself, or the parts a
    technique's optimizer (offloading's) nests inside it."""
    for technique in TECHNIQUES:
        nested = technique.nested_optimizer_states(optimizer_state)
        if nested is not None:
            return [part for inner in nested for part in optimizer_state_parts(inner)]
    return [optimizer_state]


def variant_overrides(name: str) -> tuple[str, ...] | None:
    """The overrides that switch on the technique `name` in the benchmark (None: no such variant)."""
    technique = TECHNIQUES.by_name.get(name)
    return (technique.variant_overrides or None) if technique is not None else None
