"""The benchmark's variants (`benchmark.variants=[fp8,sam,...]`): our model's training step with one technique
or optimizer switched on, built as pretraining builds it (the same Technique objects, from the overrides that
switch it on, through the same events: model surgery, optimizer wrapping, step wrapping, callbacks), and timed
interleaved with the default step, so each comes out as a ratio to the default measured in the same process.

A variant is a technique's name (one with `variant_overrides`: fp8, offload, activation-checkpointing, sam, ema) or a
`train.optim.name` (adamw8bit, lion, ...). 2:4 sparsity is not one: training keeps dense kernels and masks the
weights; scripts/bench_sparse.py times torch.sparse's 2:4 matmuls against dense ones.
"""

import torch
from omegaconf import OmegaConf

from cramming import compose_config
from cramming.bench.timing import TimedStep
from cramming.engine.precision import Precision
from cramming.errors import CrammingError
from cramming.model import ModelConfig, build_mlm_model
from cramming.pretraining import PretrainConfig  # noqa: F401  (registers the schemas pretrain.yaml names)
from cramming.train.optimizers import OPTIMIZERS, build_pretraining_optimizer
from cramming.train.techniques import (TECHNIQUES, RunContext, build_techniques, check_on_device, prepare_model,
                                       variant_overrides)


def variant_names() -> list[str]:
    return [technique.name for technique in TECHNIQUES if technique.variant_overrides] + list(OPTIMIZERS.names)


def variant_config(name: str, arch: ModelConfig):
    """The pretraining config of our step with the variant on (the benchmark's arch; only train, impl and arch
    are read): the crammed recipe's (train=cramming), so that no technique but the variant's is on (the default
    recipe's unigram start reads the prepared data, which a timed step has none of)."""

    overrides = variant_overrides(name) or (f"optim={name}",)
    cfg = compose_config("pretrain", ["data=embedded", "gpu=cpu", "train=cramming", *overrides])
    cfg.arch = OmegaConf.structured(arch)
    return cfg


def check_variants(variants: list[str], device: torch.device, compiled: bool, dtype: str) -> None:
    """One line naming the first variant that cannot run with these settings, before anything is built: the
    technique's (or optimizer's) own device checks, in the benchmark's terms."""

    known = variant_names()
    for name in variants:
        if name not in known:
            raise CrammingError(f"benchmark.variants: {name!r} is unknown; choose from {', '.join(known)}")
        cfg = variant_config(name, ModelConfig(name="variant"))
        if OPTIMIZERS.by_name[cfg.train.optim.name].cuda_only and device.type != "cuda":
            raise CrammingError(f"benchmark.variants: {name} needs a CUDA GPU; this benchmark runs on {device.type}")
        try:
            check_on_device(cfg, device, compiled, dtype, 1)
        except CrammingError as problem:
            message = str(problem).replace("impl.compile=false", "benchmark.compile=false")
            raise CrammingError(f"benchmark.variants: {message.replace('impl.precision=', 'benchmark.dtype=')}") \
                from None
        enabled = [technique for technique in TECHNIQUES if technique.enabled(cfg)]
        if any(technique.needs_cuda for technique in enabled) and device.type != "cuda":
            raise CrammingError(f"benchmark.variants: {name} needs a CUDA GPU; this benchmark runs on {device.type}")
    if len(set(variants)) != len(variants):
        raise CrammingError(f"benchmark.variants={variants} names a variant twice")


def variant_step(name: str, arch: ModelConfig, vocab_size: int, batch: dict, precision: Precision,
                 device: torch.device, compile_mode: str | None, fused_adamw: bool) -> TimedStep:
    """Our model, optimizer and step with the variant on, as pretraining builds them; compile_mode None: eager."""
    cfg = variant_config(name, arch)
    techniques = build_techniques(cfg, RunContext(device, compile_mode is not None, precision.name, 1))
    model = build_mlm_model(arch, vocab_size).to(device)
    prepare_model(techniques, model)
    network = torch.compile(model, fullgraph=True, mode=compile_mode) if compile_mode is not None else model
    optimizer = None if cfg.train.optim.name == "adamw" else build_pretraining_optimizer(model, cfg.train.optim)
    return TimedStep(network, batch, precision, device, fused_adamw=fused_adamw, optimizer=optimizer,
                     techniques=techniques)  # None: the recipe's AdamW, as the default step's
