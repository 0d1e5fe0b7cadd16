"""The first-GPU check: bench, cram and glue stages, each one 10-minute command (the work:
cramming.bench.gpu_check; docs/benchmarks.md says how to run it and holds its results).

    python scripts/gpu_check.py stage=all data_files='shards/*.txt.gz' glue_dir=glue
"""

from cramming.cli.gpu_check import main

if __name__ == "__main__":
    main()
