"""Training-step throughput, ours vs transformers' BertForMaskedLM (the work: cramming.bench.benchmark).

    python scripts/benchmark.py arch=crammed-bert benchmark.layers=4 benchmark.mlm_rate=0.15
    python scripts/benchmark.py benchmark.dtype=bf16 benchmark.compile=true benchmark.batch_size=128
"""

from cramming.cli.benchmark import main

if __name__ == "__main__":
    main()
