"""The training techniques a run switches on by config, as what the trainer composes: callbacks at the
loop's named points (layer drop, stacking, sparsity masks, distillation and importance sampling's losses), the data stream (importance
sampling's draws), the step (SAM's two passes) and the model (activation checkpointing). Each lives in its
own module; this one checks their settings and builds them.
"""

import math
from pathlib import Path

import torch
from omegaconf import OmegaConf

from cramming.data.stream import Microbatches, microbatch_stream
from cramming.errors import CrammingError
from cramming.runs import FINAL, resolve_checkpoint
from cramming.train.callbacks import Callback
from cramming.train.callbacks.distillation import Distillation
from cramming.train.callbacks.importance_sampling import ImportanceSampling
from cramming.train.callbacks.layer_drop import LayerDrop
from cramming.train.callbacks.sparsity import Sparsity
from cramming.train.callbacks.stacking import Stacking
from cramming.train.sam import SharpnessAwareStep
from cramming.train.sophia import SophiaHessian
from cramming.train.step import TrainStep

SAMPLINGS = ("sequential", "importance")
SPARSITY_METHODS = (None, "magnitude", "rigl", "semi-structured-2:4", "lottery")


def check_techniques(cfg) -> None:
    """Each technique's values in their domain and no unsupported combination: one line naming the first."""
    train = cfg.train
    drop, stacking, sparsity = train.layer_drop, train.stacking, train.sparsity
    stages, at = list(stacking.stages), stacking.at
    rules = [
        (math.isfinite(train.optim.sam_rho) and train.optim.sam_rho >= 0,
         f"train.optim.sam_rho={train.optim.sam_rho} must not be negative (0: off)"),
        (0 <= drop.max_rate < 1, f"train.layer_drop.max_rate={drop.max_rate} must be in [0, 1) (0: off)"),
        (drop.rise_fraction > 0, f"train.layer_drop.rise_fraction={drop.rise_fraction} must be positive"),
        (not stages or (len(stages) >= 2 and all(isinstance(n, int) and n >= 1 for n in stages)
                        and all(a < b for a, b in zip(stages, stages[1:]))),
         f"train.stacking.stages={stages} must be two or more increasing layer counts, e.g. [4,8,16]"),
        (not stages or stages[-1] == cfg.arch.num_layers,
         f"train.stacking.stages={stages} must end at arch.num_layers={cfg.arch.num_layers}"),
        (at is None or stages, "train.stacking.at needs train.stacking.stages"),
        (at is None or not stages or (len(at) == len(stages) - 1 and all(0 < f < 1 for f in at)
                                      and all(a < b for a, b in zip(at, list(at)[1:]))),
         f"train.stacking.at={list(at or [])} must hold one fraction in (0, 1) per stage after the first "
         f"({len(stages) - 1}), increasing"),
        (not (drop.max_rate and stages), "train.layer_drop and train.stacking both set the layers a step runs: "
         "use one at a time"),
        (train.sampling in SAMPLINGS, f"train.sampling={train.sampling!r} must be one of {', '.join(SAMPLINGS)}"),
        (sparsity.method in SPARSITY_METHODS,
         f"train.sparsity.method={sparsity.method!r} must be one of {', '.join(map(str, SPARSITY_METHODS[1:]))} "
         "(null: off)"),
        (0 < sparsity.density < 1, f"train.sparsity.density={sparsity.density} must be in (0, 1)"),
        (sparsity.method != "semi-structured-2:4" or sparsity.density == 0.5,
         f"train.sparsity.method=semi-structured-2:4 keeps 2 of every 4 weights: train.sparsity.density="
         f"{sparsity.density} must stay 0.5"),
        ((sparsity.method == "lottery") == (sparsity.ticket is not None),
         "train.sparsity.method=lottery needs train.sparsity.ticket=<the dense run>, and a ticket is read only by "
         "method=lottery"),
        (sparsity.rewind is None or (sparsity.method == "lottery" and 0 <= sparsity.rewind < 1),
         f"train.sparsity.rewind={sparsity.rewind} is a progress fraction in [0, 1), read only by method=lottery"),
        (0 <= sparsity.start < sparsity.end <= 1,
         f"train.sparsity.start={sparsity.start} and .end={sparsity.end} must satisfy 0 <= start < end <= 1"),
        (sparsity.update_every >= 1, f"train.sparsity.update_every={sparsity.update_every} must be at least 1"),
        (not (sparsity.method and stages), "train.sparsity and train.stacking do not combine: a grown layer would "
         "keep its own mask, not its source's"),
        (not (sparsity.method and train.optim.sam_rho), "train.sparsity and train.optim.sam_rho do not combine: "
         "SAM's move would reach the pruned weights"),
        (train.distill.teacher != "latest", "train.distill.teacher=latest would pick this run's own checkpoints: "
         "give the teacher's run or checkpoint directory"),
        (0 <= train.distill.alpha <= 1, f"train.distill.alpha={train.distill.alpha} must be in [0, 1]"),
        (train.distill.temperature > 0, f"train.distill.temperature={train.distill.temperature} must be positive"),
    ]
    for ok, message in rules:
        if not ok:
            raise CrammingError(message)


def build_techniques(cfg, compile_model: bool, world_size: int, device: torch.device) -> list[Callback]:
    """The callbacks of the techniques cfg switches on, after the checks that need the run's settings."""
    train, techniques = cfg.train, []
    if train.layer_drop.max_rate or train.stacking.stages:
        name = "train.layer_drop" if train.layer_drop.max_rate else "train.stacking"
        if world_size > 1:
            raise CrammingError(f"{name} runs a different set of layers per step, which DistributedDataParallel "
                                "does not support: run it on one GPU")
        if train.layer_drop.max_rate and compile_model:
            raise CrammingError("train.layer_drop would recompile the model for each set of dropped layers: add "
                                "impl.compile=false")
    if train.optim.name == "sophia":
        if world_size > 1 or compile_model:
            raise CrammingError("train.optim.name=sophia estimates its Hessian with a second backward pass through "
                                "the step's graph, tested only eagerly on one process: add impl.compile=false and "
                                "run it on one GPU")
        techniques.append(SophiaHessian(train.optim.hessian_every, train.seed))
    if train.sampling == "importance":
        if world_size > 1:
            raise CrammingError("train.sampling=importance keeps one loss table per process, which ranks under "
                                "torchrun would not share: run it on one GPU")
        techniques.append(ImportanceSampling(train.seed))
    if train.sparsity.method:
        sparsity = train.sparsity
        if sparsity.method == "semi-structured-2:4" and not supports_semi_structured(device):
            raise CrammingError(f"train.sparsity.method=semi-structured-2:4 needs an NVIDIA GPU of compute capability "
                                f"8.0 or later (Ampere, Ada, Hopper), whose sparse tensor cores run the 2:4 pattern; "
                                f"this run is on {device_name(device)}. On it, magnitude pruning to "
                                "train.sparsity.density=0.5 gives the same sparsity without the pattern")
        ticket, rewind = lottery_ticket(cfg) if sparsity.method == "lottery" else (None, None)
        techniques.append(Sparsity(sparsity.method, sparsity.density, sparsity.start, sparsity.end,
                                   sparsity.update_every, train.seed, ticket, rewind))
    if train.distill.teacher:
        teacher = resolve_checkpoint(train.distill.teacher, Path(cfg.output_dir) / cfg.name, key="train.distill.teacher")
        techniques.append(Distillation(teacher, train.distill.alpha, train.distill.temperature))
    if train.layer_drop.max_rate:
        techniques.append(LayerDrop(train.layer_drop.max_rate, train.layer_drop.rise_fraction, train.seed))
    if train.stacking.stages:
        techniques.append(Stacking(list(train.stacking.stages), train.stacking.at))
    return techniques


def supports_semi_structured(device: torch.device) -> bool:
    """torch.sparse's 2:4 kernels: CUDA devices of compute capability 8.0 or later."""
    return device.type == "cuda" and torch.cuda.get_device_capability(device) >= (8, 0)


def device_name(device: torch.device) -> str:
    if device.type != "cuda":
        return device.type
    major, minor = torch.cuda.get_device_capability(device)
    return f"{torch.cuda.get_device_name(device)} (compute capability {major}.{minor})"


def lottery_ticket(cfg) -> tuple[Path, Path | None]:
    """The dense run's final checkpoint (the mask) and the checkpoint to rewind to (None: the initialization,
    which the dense run's seed and arch rebuild: both must be this run's)."""
    sparsity = cfg.train.sparsity
    final = resolve_checkpoint(sparsity.ticket, Path(cfg.output_dir) / cfg.name, key="train.sparsity.ticket")
    run_dir = final.parent.parent
    config_path = run_dir / "config.yaml"
    if final.name != FINAL or not config_path.is_file():
        raise CrammingError(f"train.sparsity.ticket={sparsity.ticket}: {final} is not the final checkpoint of a "
                            "finished run (the ticket is the dense run's trained weights)")
    dense = OmegaConf.load(config_path)
    ours = OmegaConf.to_container(cfg.arch, resolve=True)
    if OmegaConf.to_container(dense.arch, resolve=True) != ours:
        raise CrammingError(f"train.sparsity.ticket={sparsity.ticket}: that run's arch differs from this one's: "
                            "the ticket must be drawn from the same architecture")
    if sparsity.rewind is None:
        if dense.train.seed != cfg.train.seed:
            raise CrammingError(f"train.sparsity.ticket={sparsity.ticket}: that run's train.seed={dense.train.seed} "
                                f"differs from this one's ({cfg.train.seed}), so this run's initialization is not "
                                "the ticket's: use the same seed, or rewind to a kept checkpoint")
        return final, None
    kept = sorted((run_dir / "checkpoints").glob(f"at-{sparsity.rewind:g}-step-*"))
    if not kept:
        raise CrammingError(f"train.sparsity.rewind={sparsity.rewind}: {run_dir} kept no checkpoint at that "
                            f"progress; train the dense run with checkpoint.keep_at=[{sparsity.rewind:g}]")
    return final, kept[-1]


def data_stream(techniques: list[Callback], microbatches: Microbatches, start: int, num_workers: int,
                pin_memory: bool):
    """The microbatches from global microbatch `start` on: drawn by importance sampling when it is on, else
    the prepared order."""
    for technique in techniques:
        if isinstance(technique, ImportanceSampling):
            return technique.stream(microbatches, start)
    return microbatch_stream(microbatches, start, num_workers, pin_memory)


def build_step(cfg, *args, **kwargs) -> TrainStep:
    """The optimizer step: TrainStep, or SAM's two-pass step with train.optim.sam_rho > 0."""
    rho = cfg.train.optim.sam_rho
    return SharpnessAwareStep(*args, rho=rho, **kwargs) if rho else TrainStep(*args, **kwargs)
