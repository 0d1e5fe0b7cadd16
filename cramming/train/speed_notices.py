"""Where a GPU-only option cannot beat the default, the run says so in one line at its start (a notice, not
an error: a researcher may want the option for its memory or as an ablation).

The figures are the first H100 run's (one H100 80GB, torch 2.11.0+cu130, torchao 0.18.0, crammed-bert,
2026-11-24; docs/ablations.md has them with their commands). The fp8 width rule also follows torchao's own
roofline model, which puts every encoder Linear of a 768-wide BERT below 1x at 32k tokens per step.
"""

import logging

import torch

log = logging.getLogger("pretrain")

FP8_PAYS_ABOVE_HIDDEN = 1024  # at this width and below, float8's scaling casts cost more than its matmuls save


def speed_notices(cfg, device: torch.device) -> list[str]:
    """One line per option switched on that is measured slower than the default (on a GPU; on a CPU the
    options refuse or do nothing, and say so elsewhere)."""
    if device.type != "cuda":
        return []
    notices = []
    if cfg.impl.fp8 and cfg.arch.hidden_size <= FP8_PAYS_ABOVE_HIDDEN:
        notices.append(
            f"impl.fp8=true at hidden size {cfg.arch.hidden_size} is expected to be slower than bf16: on an H100 "
            "(torch 2.11, torchao 0.18) crammed-bert ran at 0.89x bf16's tokens/s once compiled, after a 96 s "
            "compile (bf16: 42 s) inside the budget; float8 pays on wider layers (docs/ablations.md)")
    if cfg.train.optim.name == "adamw8bit":
        notices.append(
            "train.optim.name=adamw8bit saves optimizer memory, not time: torchao compiles its update once per "
            "parameter shape at the first step, inside the budget (on an H100 40 steps of crammed-bert did not "
            "finish in 120 s; docs/ablations.md)")
    if cfg.impl.offload_optimizer:
        notices.append(
            "impl.offload_optimizer=true saves GPU memory, not time: every update runs on the CPU and waits for "
            "the gradients' copy (docs/ablations.md)")
    if cfg.train.sparsity.method == "semi-structured-2:4":
        notices.append(
            "train.sparsity.method=semi-structured-2:4 is a sparsity ablation, not a speed-up: training masks the "
            "weights and keeps dense kernels, and on an H100 (torch 2.11) torch.sparse's 2:4 FFN matmuls ran at "
            "0.13x and 0.09x the dense ones (scripts/bench_sparse.py)")
    return notices


def torchao_kernels_notice() -> str | None:
    """torchao skips its compiled kernels (fp8 and low-bit ops) for a torch it was not built against, and
    says so only through its logger: one line naming both versions instead of a silent slowdown."""
    import torchao

    if not getattr(torchao, "skip_loading_so_files", False):
        return None
    return (f"torchao {torchao.__version__} skipped its compiled kernels for torch {torch.__version__} "
            f"({getattr(torchao, '_skip_reason', None) or 'no reason given'}): its options run without them; "
            "docs/reproduce.md lists the tested torch/torchao pairs")


def log_speed_notices(cfg, device: torch.device) -> None:
    """The notices above, and torchao's kernels where a torchao option runs on the GPU."""
    for notice in speed_notices(cfg, device):
        log.warning("%s", notice)
    uses_torchao = cfg.impl.fp8 or cfg.train.optim.name == "adamw8bit" or cfg.impl.offload_optimizer
    if device.type == "cuda" and uses_torchao:
        kernels = torchao_kernels_notice()
        if kernels:
            log.warning("%s", kernels)
