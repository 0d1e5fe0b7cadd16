"""Quantized training and offloading, from torchao: `impl.fp8`, `train.optim.name=adamw8bit` (built in
cramming.train.optimizers) and `impl.offload_optimizer`.

- impl.fp8=true: the Linear layers of the encoder's layers (qkv, attention output, FFN in and out) become
  torchao Float8Linear, tensorwise dynamic scaling (Micikevicius et al. 2022, "FP8 Formats for Deep
  Learning"): e4m3 forward, e5m2 gradients, matmuls in fp8 on the tensor cores, the weights and the
  optimizer in full precision. Not converted: the tied decoder (F.linear on the embedding matrix, not a
  Linear), the head transform, and any Linear with a dimension that is not a multiple of 16 (fp8 GEMMs
  need it). NVIDIA compute capability 8.9 or later (Ada, Hopper), and torch.compile, which fuses the
  scaling casts (without it fp8 is slower than bf16).
- impl.offload_optimizer=true: torchao's CPUOffloadOptimizer (the ZeRO-Offload idea, Ren et al. 2021): the
  optimizer state and an fp32 master copy of each parameter of 4096 or more values live in pinned CPU
  memory, the update runs on the CPU, the weights are copied back to the GPU. On a CPU-only run it changes
  nothing (everything is on the CPU already): one notice, and training goes on.

torchao is imported here only where one of them is switched on: importing it on a CPU machine prints
lines about its CUDA kernels.
"""

import inspect
import logging

import torch
from torch import nn

from cramming.errors import CrammingError
from cramming.train.speed_notices import log_speed_notices

log = logging.getLogger("pretrain")

FP8_MIN_CAPABILITY = (8, 9)  # Ada (sm_89) and Hopper (sm_90) have fp8 tensor cores
# Optimizers the offload wrapper may hold: those whose update reads only the parameter, its gradient and its
# own state. sophia needs the wrapper to pass Hessian estimates on; adamw8bit's states would sit on the CPU.
OFFLOADABLE = ("adamw", "lamb", "lion", "sgd-nesterov", "adafactor", "muon")


def check_low_precision(cfg) -> None:
    """The combinations that cannot work, whatever the device: one line naming the first (before any data)."""
    impl, train = cfg.impl, cfg.train
    if not impl.offload_optimizer:
        return
    offloaded = "impl.offload_optimizer=true"
    rules = [
        (train.optim.name in OFFLOADABLE, f"{offloaded} does not combine with train.optim.name={train.optim.name}: "
         f"offloading works with {', '.join(OFFLOADABLE)}"),
        (not train.stacking.stages, f"{offloaded} and train.stacking do not combine: stacking copies optimizer "
         "state between parameters, and the offloaded state lives in per-parameter CPU optimizers"),
        (not train.sparsity.method, f"{offloaded} and train.sparsity do not combine: the CPU master weights would "
         "keep the pruned values and copy them back each step"),
    ]
    for ok, message in rules:
        if not ok:
            raise CrammingError(message)


def fp8_problem(device: torch.device, capability: tuple[int, int] | None, compiled: bool) -> str | None:
    """Why impl.fp8=true cannot run here (None: it can). capability: the GPU's (major, minor), None on the CPU."""
    if device.type != "cuda" or capability is None:
        return (f"impl.fp8=true needs an NVIDIA GPU of compute capability {'.'.join(map(str, FP8_MIN_CAPABILITY))} "
                f"or later (Ada, Hopper); this run is on {device.type}")
    if tuple(capability) < FP8_MIN_CAPABILITY:
        return (f"impl.fp8=true needs an NVIDIA GPU of compute capability 8.9 or later (Ada, Hopper); this one has "
                f"{capability[0]}.{capability[1]}")
    if not compiled:
        return "impl.fp8=true needs torch.compile, which fuses fp8's scaling casts (slower than bf16 without): " \
               "remove impl.compile=false"
    return None


def check_on_device(cfg, device: torch.device, compiled: bool, precision: str, world_size: int) -> None:
    """The checks that need the run's device and settings, before any data is prepared; on a CPU-only run
    impl.offload_optimizer=true is a notice, not an error."""
    impl, optim = cfg.impl, cfg.train.optim
    if impl.fp8:
        capability = torch.cuda.get_device_capability(device) if device.type == "cuda" else None
        problem = fp8_problem(device, capability, compiled)
        if problem:
            raise CrammingError(problem)
    if optim.name == "adamw8bit" and device.type != "cuda":
        raise CrammingError(f"train.optim.name=adamw8bit (torchao's 8-bit AdamW states) needs a CUDA GPU; this run "
                            f"is on {device.type}: use train.optim.name=adamw")
    if impl.offload_optimizer:
        if device.type != "cuda":
            log.info("impl.offload_optimizer=true: a no-op on cpu (the optimizer state is in CPU memory already)")
        elif world_size > 1:
            raise CrammingError("impl.offload_optimizer=true is for one GPU (torchao's CPUOffloadOptimizer): run "
                                "without torchrun")
        elif precision == "fp16":
            raise CrammingError("impl.offload_optimizer=true does not combine with fp16 loss scaling (the gradients "
                                "are copied to the CPU before they are unscaled): use impl.precision=bf16 or fp32")
    log_speed_notices(cfg, device)


# --- fp8 -------------------------------------------------------------------------------------------


def fp8_linear_filter(module: nn.Module, name: str) -> bool:
    """Which Linear layers become Float8Linear: those inside the encoder's layers whose dimensions are both
    multiples of 16."""
    if not isinstance(module, nn.Linear) or not name.startswith("bert.layer."):
        return False
    out_features, in_features = module.weight.shape
    return out_features % 16 == 0 and in_features % 16 == 0


def convert_to_fp8(model: nn.Module, emulate: bool = False) -> list[str]:
    """Swap the filtered Linear layers for torchao's Float8Linear (tensorwise dynamic scaling), in place;
    returns their names. The weights stay the same Parameters (so state-dict keys and checkpoints do not
    change). emulate: torchao's emulation of the fp8 matmuls in full precision, which runs anywhere (tests)."""
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training

    chosen = [name for name, module in model.named_modules() if fp8_linear_filter(module, name)]
    convert_to_float8_training(model, module_filter_fn=fp8_linear_filter, config=Float8LinearConfig(emulate=emulate))
    log.info("impl.fp8: %d Linear layers in float8 (tensorwise scaling)", len(chosen))
    return chosen


# --- CPU offload ------------------------------------------------------------------------------------


def offload(optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
    """The optimizer rebuilt inside torchao's CPUOffloadOptimizer: the same class, parameter groups and
    hyperparameters, its state and the master weights in pinned CPU memory (CUDA only)."""
    from torchao.optim import CPUOffloadOptimizer

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
    return ClippedCPUOffloadOptimizer(groups, type(optimizer), **defaults)
