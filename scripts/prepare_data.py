"""Prepare (or find in the cache) a pretraining dataset and print its summary (the work: cramming.data.prepare).

    python scripts/prepare_data.py data=embedded
    python scripts/prepare_data.py data=local data.files='corpus/*.txt.gz' data.tokenizer.kind=bpe
"""

from cramming.cli.prepare_data import main

if __name__ == "__main__":
    main()
