"""Prepare (or find in the cache) a pretraining dataset and print its summary: `python
scripts/prepare_data.py` or `cramming-prepare-data`.

    python scripts/prepare_data.py data=embedded
    python scripts/prepare_data.py data=local data.files='corpus/*.txt.gz' data.tokenizer.kind=bpe
"""

import time
from dataclasses import dataclass

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

from cramming.cli import hydra_command
from cramming.data.description import describe_dataset
from cramming.data.prepare import prepare_dataset
from cramming.data.sources import DataConfig  # registers the data schema


@dataclass
class PrepareDataConfig:
    """Top level of `scripts/prepare_data.py`."""

    data: DataConfig = MISSING
    cache_dir: str = "${oc.env:CRAMMING_CACHE,'~/.cache/cramming'}"  # prepared datasets go to <cache_dir>/data


ConfigStore.instance().store(name="prepare_data_schema", node=PrepareDataConfig)


@hydra_command("prepare_data", PrepareDataConfig, directories=("cache_dir",))
def main(cfg: PrepareDataConfig) -> None:
    started = time.perf_counter()
    dataset, reused = prepare_dataset(cfg.data, cfg.cache_dir)
    print(describe_dataset(dataset, reused, time.perf_counter() - started), flush=True)


if __name__ == "__main__":
    main()
