"""Corpus preparation against bare `tokenizers` encoding of the same files (the work: cramming.bench.prepare_speed)."""

from cramming.bench.prepare_speed import main

if __name__ == "__main__":
    main()
