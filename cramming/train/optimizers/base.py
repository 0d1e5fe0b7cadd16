"""What a pretraining optimizer is: one class in one file that declares what it reads and needs, and builds
the torch optimizer. The config schema, the checks, the techniques, the preflight's disk estimate and the
benchmark ask the registry (optimizers/__init__.py) and never name an optimizer.

Declared at class level:
- `name`: its `train.optim.name` (and `optim=<name>`, which composes configs/optim/<name>.yaml);
- `keys`: the hyperparameters of `train.optim` it reads (each set for it, the others null: OptimConfig.check);
- `settings`: the hyperparameters no other optimizer reads (`Setting`s under `train.optim`, null by default),
  added to the schema;
- `cuda_only`, `speed_notice`, `uses_torchao_kernels`: what it needs of the device, and where it is slower;
- `state_bytes_per_parameter`: its state in a checkpoint, at most (the disk estimate);
- `offloadable`: whether `impl.offload_optimizer` may hold it.
"""

from typing import ClassVar

import torch
from torch import nn

from cramming.adamw import parameter_groups
from cramming.errors import CrammingError
from cramming.plugin_keys import Setting


def optimizer_groups(model: nn.Module, optim) -> list[dict]:
    """The parameter groups every optimizer here takes: weight decay on matrices only."""
    return parameter_groups(model, optim.weight_decay, optim.decay_embeddings)


class Optimizer:
    """One optimizer of `train.optim`; see the module docstring for what it declares."""

    name: ClassVar[str]
    keys: ClassVar[tuple[str, ...]]  # the hyperparameters it reads, all in configs/optim/<name>.yaml
    settings: ClassVar[tuple[Setting, ...]] = ()  # its own hyperparameters (train.optim.<key>, null by default)
    cuda_only: ClassVar[str | None] = None  # what needs CUDA, for the error elsewhere (None: runs anywhere)
    speed_notice: ClassVar[str | None] = None  # on a GPU: where it is measured slower than the default
    uses_torchao_kernels: ClassVar[bool] = False  # on a GPU, its speed depends on torchao's compiled kernels
    state_bytes_per_parameter: ClassVar[float] = 8  # at most, in a checkpoint (AdamW: two fp32 moments)
    # impl.offload_optimizer may hold it (torchao's CPUOffloadOptimizer): its update reads only the parameter,
    # its gradient and its own state
    offloadable: ClassVar[bool] = False

    @staticmethod
    def build(model: nn.Module, optim) -> torch.optim.Optimizer:
        """The torch optimizer over the model's parameters, from the resolved (checked) `train.optim`."""
        raise NotImplementedError

    @classmethod
    def check_on_device(cls, device: torch.device) -> None:
        if cls.cuda_only and device.type != "cuda":
            raise CrammingError(f"train.optim.name={cls.name} ({cls.cuda_only}) needs a CUDA GPU; this run is on "
                                f"{device.type}: use train.optim.name=adamw")
