"""Float8 training (torchao): `impl.fp8=true`.

The Linear layers of the encoder's layers (qkv, attention output, FFN in and out) become torchao
Float8Linear, tensorwise dynamic scaling (Micikevicius et al. 2022, "FP8 Formats for Deep Learning"): e4m3
forward, e5m2 gradients, matmuls in fp8 on the tensor cores, the weights and the optimizer in full
precision. Not converted: the tied decoder (F.linear on the embedding matrix, not a Linear), the head
transform, and any Linear with a dimension that is not a multiple of 16 (fp8 GEMMs need it). NVIDIA compute
capability 8.9 or later (Ada, Hopper), and torch.compile, which fuses the scaling casts (without it fp8 is
slower than bf16). torchao is imported only when it is on: importing it on a CPU machine prints lines about
its CUDA kernels.
"""

import logging

import torch
from torch import nn

from cramming.errors import CrammingError
from cramming.model.crammed_bert import in_encoder_layers
from cramming.plugins import Setting
from cramming.train.techniques.base import RunContext, Technique

log = logging.getLogger("pretrain")

FP8_MIN_CAPABILITY = (8, 9)  # Ada (sm_89) and Hopper (sm_90) have fp8 tensor cores
# At this width and below, float8's scaling casts cost more than its matmuls save: the first H100 run (one H100
# 80GB, torch 2.11.0+cu130, torchao 0.18.0, 2026-11-24; docs/ablations.md), and torchao's own roofline model,
# which puts every encoder Linear of a 768-wide BERT below 1x at 32k tokens per step.
FP8_PAYS_ABOVE_HIDDEN = 1024


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


def fp8_linear_filter(module: nn.Module, name: str) -> bool:
    """Which Linear layers become Float8Linear: those inside the encoder's layers whose dimensions are both
    multiples of 16."""
    if not isinstance(module, nn.Linear) or not in_encoder_layers(name):
        return False
    out_features, in_features = module.weight.shape
    return out_features % 16 == 0 and in_features % 16 == 0


def convert_to_fp8(model: nn.Module, emulate: bool = False) -> list[str]:
    """Swap the filtered Linear layers for torchao's Float8Linear (tensorwise dynamic scaling), in place;
    returns their names. The weights stay the same Parameters (so state-dict keys and checkpoints do not
    change). emulate: torchao's emulation of the fp8 matmuls in full precision, which runs anywhere (tests)."""
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training  # noqa: PLC0415 -- impl.fp8 only

    chosen = [name for name, module in model.named_modules() if fp8_linear_filter(module, name)]
    convert_to_float8_training(model, module_filter_fn=fp8_linear_filter, config=Float8LinearConfig(emulate=emulate))
    log.info("impl.fp8: %d Linear layers in float8 (tensorwise scaling)", len(chosen))
    return chosen


class Fp8(Technique):
    name, override = "fp8", "impl.fp8=true"
    switch = "impl.fp8"
    # true: the encoder layers' Linear layers compute in float8; needs an NVIDIA GPU of compute capability 8.9+
    # (Ada, Hopper) and compile; anywhere else a one-line error
    settings = (Setting("impl.fp8", bool, False),)
    variant_overrides = ("impl.fp8=true",)
    uses_torchao_kernels = needs_cuda = True

    @staticmethod
    def check_on_device(cfg, run: RunContext) -> None:
        capability = torch.cuda.get_device_capability(run.device) if run.device.type == "cuda" else None
        problem = fp8_problem(run.device, capability, run.compile)
        if problem:
            raise CrammingError(problem)

    @staticmethod
    def speed_notice(cfg, device: torch.device) -> str | None:
        if cfg.arch.hidden_size > FP8_PAYS_ABOVE_HIDDEN:
            return None
        return (f"impl.fp8=true at hidden size {cfg.arch.hidden_size} is expected to be slower than bf16: on an H100 "
                "(torch 2.11, torchao 0.18) crammed-bert ran at 0.89x bf16's tokens/s once compiled, after a 96 s "
                "compile (bf16: 42 s) inside the budget; float8 pays on wider layers (docs/ablations.md)")

    @staticmethod
    def microbatch_key(cfg) -> dict:
        return {"fp8": True}  # its casts and scales

    @classmethod
    def build(cls, cfg, run: RunContext) -> "Fp8":
        return cls()

    def on_model(self, model: torch.nn.Module) -> None:
        convert_to_fp8(model)
