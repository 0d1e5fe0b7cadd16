"""Optimizer offloading (torchao's CPUOffloadOptimizer; the ZeRO-Offload idea, Ren et al. 2021):
`impl.offload_optimizer=true`.

The optimizer state and an fp32 master copy of each parameter of 4096 or more values live in pinned CPU
memory, the update runs on the CPU, the weights are copied back to the GPU. On a CPU-only run it changes
nothing (everything is on the CPU already): one notice, and training goes on. torchao is imported only
when it is on.
"""

import inspect
import logging

import torch

from cramming.errors import CrammingError, require
from cramming.plugins import Setting
from cramming.train.optimizers import OPTIMIZERS
from cramming.train.techniques.base import RunContext, Technique

log = logging.getLogger("pretrain")

MINIMAL_SIZE = 4096  # torchao's minimal_size: smaller parameters stay on the GPU, with their state


def offload(optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
    """The optimizer rebuilt inside torchao's CPUOffloadOptimizer: the same class, parameter groups and
    hyperparameters, its state and the master weights in pinned CPU memory (CUDA only)."""
    from torchao.optim import CPUOffloadOptimizer  # noqa: PLC0415 -- as said at the top: only when it is on

    class ClippedCPUOffloadOptimizer(CPUOffloadOptimizer):
        """torchao copies each gradient to the CPU as soon as backward has produced it, i.e. before our
        step clips it (and before a budget-cut step rescales it): step() copies the final gradients again,
        so the CPU update sees what the on-device optimizer would. One more device-to-host copy of the
        gradients per optimizer step (not per microbatch)."""

        @torch.no_grad()
        def step(self, closure=None):
            device_module = getattr(torch, self.device)
            self.stream.wait_stream(device_module.current_stream())
            with device_module.stream(self.stream):
                for p_device, p_host in self.param_d2h_map.items():
                    if p_device.grad is not None:
                        p_host.grad.copy_(p_device.grad, non_blocking=True)
                        self.queue.pop(p_device, None)
                        self.queue[p_device] = self.stream.record_event()
            return super().step(closure)

    accepted = inspect.signature(type(optimizer)).parameters  # defaults may hold keys the constructor lacks
    defaults = {key: value for key, value in optimizer.defaults.items() if key in accepted}
    groups = [dict(group) for group in optimizer.param_groups]  # each group keeps its own hyperparameters
    return ClippedCPUOffloadOptimizer(groups, type(optimizer), minimal_size=MINIMAL_SIZE, **defaults)


class OffloadOptimizer(Technique):
    name, override = "offload", "impl.offload_optimizer=true"
    switch = "impl.offload_optimizer"
    # true: optimizer state and master weights in CPU memory, the update on the CPU (one GPU, not fp16); a no-op
    # with a notice on a CPU-only run
    settings = (Setting("impl.offload_optimizer", bool, False),)
    variant_overrides = ("impl.offload_optimizer=true",)
    uses_torchao_kernels = needs_cuda = True
    conflicts = {"stacking": "do not combine: stacking copies optimizer state between parameters, and the "
                             "offloaded state lives in per-parameter CPU optimizers",
                 "sparsity": "do not combine: the CPU master weights would keep the pruned values and copy them "
                             "back each step"}

    def __init__(self, on_gpu: bool):
        self.on_gpu = on_gpu

    @classmethod
    def check(cls, cfg) -> None:
        name = cfg.train.optim.name
        offloadable = [optimizer.name for optimizer in OPTIMIZERS if optimizer.offloadable]
        require([(not cfg.impl.offload_optimizer or name in offloadable,
                  f"impl.offload_optimizer=true does not combine with train.optim.name={name}: offloading works "
                  f"with {', '.join(offloadable)}")])

    @staticmethod
    def check_on_device(cfg, run: RunContext) -> None:
        if run.device.type != "cuda":
            log.info("impl.offload_optimizer=true: a no-op on cpu (the optimizer state is in CPU memory already)")
        elif run.world_size > 1:
            raise CrammingError("impl.offload_optimizer=true is for one GPU (torchao's CPUOffloadOptimizer): run "
                                "without torchrun")
        elif run.precision == "fp16":
            raise CrammingError("impl.offload_optimizer=true does not combine with fp16 loss scaling (the gradients "
                                "are copied to the CPU before they are unscaled): use impl.precision=bf16 or fp32")

    @staticmethod
    def speed_notice(cfg, device: torch.device) -> str | None:
        return ("impl.offload_optimizer=true saves GPU memory, not time: every update runs on the CPU and waits for "
                "the gradients' copy (docs/ablations.md)")

    @staticmethod
    def nested_optimizer_states(optimizer_state: dict) -> list[dict] | None:
        """torchao's CPUOffloadOptimizer nests one state dict per offloaded parameter, plus one for those left on
        the device."""
        if "offloaded" not in optimizer_state and "on-device" not in optimizer_state:
            return None
        return [*optimizer_state.get("offloaded", []), *filter(None, [optimizer_state.get("on-device")])]

    @classmethod
    def build(cls, cfg, run: RunContext) -> "OffloadOptimizer":
        return cls(on_gpu=run.device.type == "cuda")

    def wrap_optimizer(self, optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
        return offload(optimizer) if self.on_gpu else optimizer

    def extra_memory(self, model: torch.nn.Module) -> int:
        """Negative: the microbatch search counts AdamW's two moments on the GPU for every run, and here those
        of every offloaded parameter live in CPU memory, so the search can give that room to activations."""
        if not self.on_gpu:
            return 0
        return -2 * sum(p.numel() * p.element_size() for p in model.parameters() if p.numel() >= MINIMAL_SIZE)
