"""The training techniques a run switches on by config, as what the trainer composes: callbacks at the
loop's named points (layer drop, stacking), the step (SAM's two passes) and the model (activation
checkpointing). Each lives in its own module; this one checks their settings and builds them.
"""

import math

from cramming.errors import CrammingError
from cramming.train.callbacks import Callback
from cramming.train.callbacks.layer_drop import LayerDrop
from cramming.train.callbacks.stacking import Stacking
from cramming.train.sam import SharpnessAwareStep
from cramming.train.step import TrainStep


def check_techniques(cfg) -> None:
    """Each technique's values in their domain and no unsupported combination: one line naming the first."""
    train = cfg.train
    drop, stacking = train.layer_drop, train.stacking
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
    ]
    for ok, message in rules:
        if not ok:
            raise CrammingError(message)


def build_techniques(cfg, compile_model: bool, world_size: int) -> list[Callback]:
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
    if train.layer_drop.max_rate:
        techniques.append(LayerDrop(train.layer_drop.max_rate, train.layer_drop.rise_fraction, train.seed))
    if train.stacking.stages:
        techniques.append(Stacking(list(train.stacking.stages), train.stacking.at))
    return techniques


def build_step(cfg, *args, **kwargs) -> TrainStep:
    """The optimizer step: TrainStep, or SAM's two-pass step with train.optim.sam_rho > 0."""
    rho = cfg.train.optim.sam_rho
    return SharpnessAwareStep(*args, rho=rho, **kwargs) if rho else TrainStep(*args, **kwargs)
