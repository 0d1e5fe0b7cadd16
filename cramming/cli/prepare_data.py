"""Prepare (or find in the cache) a pretraining dataset and print its summary: `python
scripts/prepare_data.py` or `cramming-prepare-data`.

    python scripts/prepare_data.py data=embedded
    python scripts/prepare_data.py data=local data.files='corpus/*.txt.gz' data.tokenizer.kind=bpe
"""

import time

from cramming.cli import hydra_command
from cramming.data.config import PrepareDataConfig  # registers the config schemas


@hydra_command("prepare_data", PrepareDataConfig, directories=("cache_dir",))
def main(cfg: PrepareDataConfig) -> None:
    from cramming.data.description import describe_dataset
    from cramming.data.prepare import prepare_dataset

    started = time.perf_counter()
    dataset, reused = prepare_dataset(cfg.data, cfg.cache_dir)
    print(describe_dataset(dataset, reused, time.perf_counter() - started), flush=True)


if __name__ == "__main__":
    main()
