"""What a `train.optim.name` choice is: the `Optimizer` description each one has in the registry
(cramming.train.optimizers), and the parameter groups every optimizer here is built over."""

from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch import nn

from cramming.errors import CrammingError
from cramming.adamw import parameter_groups


@dataclass(frozen=True)
class Optimizer:
    keys: tuple[str, ...]  # the hyperparameters it reads, all in configs/optim/<name>.yaml
    build: Callable[[nn.Module, Any], torch.optim.Optimizer]  # (model, resolved train.optim)
    cuda_only: str | None = None  # what needs CUDA, for the error elsewhere (None: runs anywhere)
    speed_notice: str | None = None  # on a GPU: where it is measured slower than the default
    uses_torchao_kernels: bool = False  # on a GPU, its speed depends on torchao's compiled kernels
    state_bytes_per_parameter: float = 8  # at most, in a checkpoint (AdamW: two fp32 moments); for disk estimates
    # impl.offload_optimizer may hold it (torchao's CPUOffloadOptimizer): its update reads only the parameter, its
    # gradient and its own state
    offloadable: bool = False

    def check_on_device(self, name: str, device: torch.device) -> None:
        if self.cuda_only and device.type != "cuda":
            raise CrammingError(f"train.optim.name={name} ({self.cuda_only}) needs a CUDA GPU; this run is on "
                                f"{device.type}: use train.optim.name=adamw")


def optimizer_groups(model, optim) -> list[dict]:
    """The parameter groups every optimizer here takes: weight decay on matrices only."""
    return parameter_groups(model, optim.weight_decay, optim.decay_embeddings)
