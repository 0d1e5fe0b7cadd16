"""Training-step throughput, ours vs transformers' BertForMaskedLM, side by side in one process:
`python scripts/benchmark.py` or `cramming-benchmark` (cramming.bench.benchmark does the work).

    python scripts/benchmark.py arch=crammed-bert benchmark.layers=4 benchmark.mlm_rate=0.15
    python scripts/benchmark.py benchmark.dtype=bf16 benchmark.compile=true benchmark.batch_size=128
"""

from cramming.bench.benchmark import BenchmarkConfig, run_benchmark  # registers the config schema
from cramming.cli import hydra_command


@hydra_command("benchmark", BenchmarkConfig, directories=("benchmark.output_dir",))
def main(cfg: BenchmarkConfig) -> None:
    run_benchmark(cfg)


if __name__ == "__main__":
    main()
