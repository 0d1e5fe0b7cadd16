"""The benchmark's variants (`benchmark.variants=[fp8,adamw8bit,...]`): our model's training step with one
GPU option switched on, built as the trainer builds it and timed interleaved with the default step, so
each option's tokens/s and peak memory come out as a ratio to the default measured in the same process.

- fp8: the encoder Linears in torchao float8 (cramming.train.low_precision; compute capability 8.9+, compile);
- adamw8bit: torchao's 8-bit AdamW with the recipe's values (configs/optim/adamw8bit.yaml; CUDA);
- offload: AdamW inside torchao's CPUOffloadOptimizer (CUDA);
- activation-checkpointing: each encoder layer recomputed in the backward pass (anywhere).

2:4 sparsity is not a variant: training keeps dense kernels and masks the weights; scripts/bench_sparse.py
times torch.sparse's 2:4 matmuls against dense ones.
"""

import torch
from omegaconf import OmegaConf

from cramming.bench.timing import TimedStep
from cramming.errors import CrammingError
from cramming.model import ModelConfig, build_mlm_model
from cramming.runtime import Precision, recipe_adamw

VARIANTS = ("fp8", "adamw8bit", "offload", "activation-checkpointing")
CUDA_ONLY = ("adamw8bit", "offload")


def check_variants(variants: list[str], device: torch.device, compiled: bool, dtype: str) -> None:
    """One line naming the first variant that cannot run with these settings, before anything is built."""
    from cramming.train.techniques.fp8 import fp8_problem

    for name in variants:
        if name not in VARIANTS:
            raise CrammingError(f"benchmark.variants: {name!r} is unknown; choose from {', '.join(VARIANTS)}")
        if name in CUDA_ONLY and device.type != "cuda":
            raise CrammingError(f"benchmark.variants: {name} needs a CUDA GPU; this benchmark runs on "
                                f"{device.type}")
        if name == "fp8":
            capability = torch.cuda.get_device_capability(device) if device.type == "cuda" else None
            problem = fp8_problem(device, capability, compiled)
            if problem:
                problem = problem.replace("impl.compile=false", "benchmark.compile=false")
                raise CrammingError(f"benchmark.variants: {problem}")
        if name == "offload" and dtype == "fp16":
            raise CrammingError("benchmark.variants: offload does not combine with fp16 loss scaling; use "
                                "benchmark.dtype=bf16")
    if len(set(variants)) != len(variants):
        raise CrammingError(f"benchmark.variants={variants} names a variant twice")


def variant_step(name: str, arch: ModelConfig, vocab_size: int, batch: dict, precision: Precision,
                 device: torch.device, compile_mode: str | None, fused_adamw: bool) -> TimedStep:
    """Our model and optimizer with the variant switched on, as pretraining builds them; compile_mode None:
    eager."""
    from cramming.train.techniques.activation_checkpointing import checkpoint_activations
    from cramming.train.techniques.fp8 import convert_to_fp8
    from cramming.train.techniques.offload import offload
    from cramming.train.optimizers import build_pretraining_optimizer, optimizer_defaults

    model = build_mlm_model(arch, vocab_size).to(device)
    if name == "activation-checkpointing":
        checkpoint_activations(model)
    if name == "fp8":
        convert_to_fp8(model)
    if compile_mode is not None:
        model = torch.compile(model, fullgraph=True, mode=compile_mode)
    optimizer = None
    if name == "adamw8bit":
        optim = OmegaConf.create({**optimizer_defaults("adamw8bit"), "decay_embeddings": True})
        optimizer = build_pretraining_optimizer(model, OmegaConf.merge(optim, {"name": "adamw8bit"}))
    if name == "offload":
        optimizer = offload(recipe_adamw(model, fused=fused_adamw))
    return TimedStep(model, batch, precision, device, fused_adamw=fused_adamw, optimizer=optimizer)
