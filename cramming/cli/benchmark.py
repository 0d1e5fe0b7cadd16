"""Training-step throughput, ours vs transformers' BertForMaskedLM, side by side in one process:
`python scripts/benchmark.py` or `cramming-benchmark` (cramming.bench.benchmark does the work). On a CPU with
no size on the command line it runs 4 layers, not crammed-bert's 16, and says so.

    python scripts/benchmark.py arch=crammed-bert benchmark.layers=4 benchmark.mlm_rate=0.15
    python scripts/benchmark.py benchmark.dtype=bf16 benchmark.compile=true benchmark.batch_size=128   # on a GPU
"""

import logging

import psutil
import torch
from hydra.core.hydra_config import HydraConfig

from cramming.bench.benchmark import (  # registers the config schema
    BenchmarkConfig,
    run_benchmark,
)
from cramming.cli import hydra_command
from cramming.errors import CrammingError

log = logging.getLogger(__name__)
# On the CPU, with no size on the command line: the depth of the CPU figures in docs/benchmarks.md, 30 s to 2 minutes
# on two cores (crammed-bert's full 16 layers take about ten there, at 5 GB).
CPU_LAYERS = 4
SIZE_KEYS = ("arch", "benchmark.layers", "benchmark.batch_size", "benchmark.seq_length", "benchmark.vocab_size")


@hydra_command("benchmark", BenchmarkConfig, directories=("benchmark.output_dir",))
def main(cfg: BenchmarkConfig) -> None:
    if on_the_cpu(cfg) and not any(o.lstrip("+~").startswith(SIZE_KEYS) for o in HydraConfig.get().overrides.task):
        log.warning("on the CPU with no size given: benchmark.layers=%d instead of %s's %d, to end in minutes "
                    "(set benchmark.layers= to choose)", CPU_LAYERS, cfg.arch.name, cfg.arch.num_layers)
        cfg.benchmark.layers = CPU_LAYERS
    check_it_fits_on_the_cpu(cfg)
    run_benchmark(cfg)


def on_the_cpu(cfg: BenchmarkConfig) -> bool:
    return cfg.benchmark.device == "cpu" or (cfg.benchmark.device == "auto" and not torch.cuda.is_available())


def check_it_fits_on_the_cpu(cfg: BenchmarkConfig) -> None:
    """On the CPU, a step that cannot fit in memory (a GPU's batch) is refused before the kernel kills it,
    minutes later and without a word. The bound is BertForMaskedLM's alone, and low: the activations a
    transformer layer keeps for backward in 16-bit, 34·h + 5·heads·s bytes per token (Korthikanti et al. 2022,
    "Reducing Activation Recomputation in Large Transformer Models"), and its full-vocabulary logits and their
    gradient in fp32."""
    s, arch = cfg.benchmark, cfg.arch
    if not on_the_cpu(cfg):
        return
    layers, tokens = s.layers or arch.num_layers, s.batch_size * s.seq_length
    needed = tokens * (layers * (34 * arch.hidden_size + 5 * arch.num_heads * s.seq_length) + 2 * 4 * s.vocab_size)
    available = psutil.virtual_memory().available
    if needed > available:
        raise CrammingError(
            f"benchmark.batch_size={s.batch_size}: on the CPU, transformers' BertForMaskedLM alone needs at least "
            f"{needed / 2**30:.1f} GiB at {s.batch_size} x {s.seq_length} tokens ({layers} layers, hidden "
            f"{arch.hidden_size}, vocabulary {s.vocab_size}) and this machine has {available / 2**30:.1f} GiB "
            "available: lower benchmark.batch_size (or benchmark.layers), or run it on a GPU")


if __name__ == "__main__":
    main()
