"""Training-step throughput, ours vs transformers' BertForMaskedLM, side by side in one process:
`python scripts/benchmark.py` or `cramming-benchmark` (cramming.bench.benchmark does the work).

    python scripts/benchmark.py arch=crammed-bert benchmark.layers=4 benchmark.mlm_rate=0.15
    python scripts/benchmark.py benchmark.dtype=bf16 benchmark.compile=true benchmark.batch_size=128
"""

import hydra

from cramming import CONFIG_DIR
from cramming.bench.benchmark import BenchmarkConfig, run_benchmark  # registers the config schema
from cramming.errors import exit_on_user_error


@hydra.main(version_base="1.3", config_path=str(CONFIG_DIR), config_name="benchmark")
@exit_on_user_error
def main(cfg: BenchmarkConfig) -> None:
    run_benchmark(cfg)


if __name__ == "__main__":
    main()
