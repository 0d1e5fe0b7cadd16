"""torchrun awareness kept apart from the training loop: rank, world size, and a few collectives."""

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass
class Distributed:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @classmethod
    def from_env(cls, device_type: str) -> "Distributed":
        """Join the process group when launched by torchrun (nccl on GPUs, gloo on CPUs)."""
        world_size = int(os.environ.get("WORLD_SIZE", "1"))
        if world_size == 1:
            return cls()
        if not dist.is_initialized():
            dist.init_process_group(backend="nccl" if device_type == "cuda" else "gloo")
        return cls(dist.get_rank(), world_size, int(os.environ.get("LOCAL_RANK", "0")))

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    def barrier(self) -> None:
        if self.enabled:
            dist.barrier()

    def any(self, flag: bool, device: torch.device) -> bool:
        """True on every rank if it is true on any rank: all ranks stop on the same microbatch."""
        if not self.enabled:
            return flag
        tensor = torch.tensor([float(flag)], device=device)
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
        return bool(tensor.item())

    def mean(self, value: torch.Tensor) -> torch.Tensor:
        if self.enabled:
            value = value.clone()
            dist.all_reduce(value, op=dist.ReduceOp.SUM)
            value /= self.world_size
        return value

    def sum(self, value: torch.Tensor) -> torch.Tensor:
        if self.enabled:
            value = value.clone()
            dist.all_reduce(value, op=dist.ReduceOp.SUM)
        return value

    def average_gradients(self, model: torch.nn.Module) -> None:
        if self.enabled:
            for parameter in model.parameters():
                if parameter.grad is not None:
                    dist.all_reduce(parameter.grad, op=dist.ReduceOp.SUM)  # gloo has no AVG
                    parameter.grad /= self.world_size

    def broadcast(self, obj):
        """Rank 0's value of a picklable object on every rank."""
        if not self.enabled:
            return obj
        holder = [obj]
        dist.broadcast_object_list(holder, src=0)
        return holder[0]

    def close(self) -> None:
        if self.enabled and dist.is_initialized():
            dist.destroy_process_group()
