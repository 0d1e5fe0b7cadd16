"""Tokens per character against vocabulary size, as the trash filter sees them: see cramming/bench/trash_ratio.py."""

from cramming.bench.trash_ratio import main

if __name__ == "__main__":
    main()
