"""The pretraining optimizer: the config group `optim` (`optim=lion`, or `train.optim.name=lion`) composes
`configs/optim/<name>.yaml`, its name and its defaults, into `train.optim`. One file each (base.py says what an
optimizer declares) and the registry everything else asks: the config schema (their own hyperparameters),
the checks, the techniques, the preflight and the benchmark.

A hyperparameter the optimizer does not use is an error rather than silently ignored (OptimConfig.check).
Weight decay falls on matrices only for all of them (cramming.adamw.parameter_groups). Implementations come
from torch.optim where it has them, from pytorch-optimizer (LAMB, Lion, Muon) and torchao (8-bit AdamW)
otherwise; SophiaG is written here. docs/ablations.md says what each does.

Adding one: its file (an Optimizer subclass and its builder), one line in OPTIMIZERS, and
configs/optim/<name>.yaml with its defaults.
"""

from cramming.train.optimizers.adafactor import Adafactor
from cramming.train.optimizers.adamw import AdamW
from cramming.train.optimizers.adamw8bit import AdamW8bit
from cramming.train.optimizers.base import Optimizer
from cramming.train.optimizers.lamb import Lamb
from cramming.train.optimizers.lion import Lion
from cramming.train.optimizers.muon import Muon
from cramming.train.optimizers.sgd_nesterov import SgdNesterov
from cramming.train.optimizers.sophia import Sophia

OPTIMIZERS: tuple[type[Optimizer], ...] = (AdamW, Lamb, Lion, SgdNesterov, Adafactor, Muon, AdamW8bit, Sophia)
NAMES = {optimizer.name: optimizer for optimizer in OPTIMIZERS}  # train.optim.name → its class

__all__ = ["NAMES", "OPTIMIZERS", "Optimizer", "build_pretraining_optimizer"]


def build_pretraining_optimizer(model, optim):
    """The optimizer train.optim (checked) describes, over the model's parameters."""
    return NAMES[optim.name].build(model, optim)
