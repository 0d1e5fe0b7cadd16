"""Prepare (or find in the cache) a pretraining dataset and print its summary.

    python scripts/prepare_data.py data=embedded
    python scripts/prepare_data.py data=local data.files='corpus/*.txt.gz' data.tokenizer.kind=bpe
"""

import logging
import sys
import time
from pathlib import Path

import hydra

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cramming.cli import quote_path_overrides  # noqa: E402
from cramming.data.config import PrepareDataConfig  # noqa: E402  (registers the config schema)
from cramming.data.prepare import format_summary, prepare_dataset  # noqa: E402
from cramming.errors import exit_on_user_error  # noqa: E402

log = logging.getLogger("prepare_data")


@hydra.main(version_base="1.3", config_path="../configs", config_name="prepare_data")
@exit_on_user_error
def main(cfg: PrepareDataConfig) -> None:
    started = time.perf_counter()
    dataset, reused = prepare_dataset(cfg.data, cfg.cache_dir)
    print(format_summary(dataset, reused, time.perf_counter() - started), flush=True)


if __name__ == "__main__":
    quote_path_overrides()
    main()
