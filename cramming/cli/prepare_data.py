"""Prepare (or find in the cache) a pretraining dataset and print its summary: `python
scripts/prepare_data.py` or `cramming-prepare-data`.

    python scripts/prepare_data.py data=embedded
    python scripts/prepare_data.py data=local data.files='corpus/*.txt.gz' data.tokenizer.kind=bpe
"""

import time

import hydra

from cramming import CONFIG_DIR
from cramming.cli import quote_path_overrides
from cramming.data.config import PrepareDataConfig  # registers the config schemas
from cramming.errors import exit_on_user_error


@hydra.main(version_base="1.3", config_path=str(CONFIG_DIR), config_name="prepare_data")
@exit_on_user_error
def _prepare(cfg: PrepareDataConfig) -> None:
    from cramming.data.prepare import format_summary, prepare_dataset

    started = time.perf_counter()
    dataset, reused = prepare_dataset(cfg.data, cfg.cache_dir)
    print(format_summary(dataset, reused, time.perf_counter() - started), flush=True)


def main() -> None:
    quote_path_overrides()
    _prepare()


if __name__ == "__main__":
    main()
