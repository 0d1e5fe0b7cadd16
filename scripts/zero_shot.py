"""Score a checkpoint zero-shot on BLiMP and bits per character (the entry point: cramming.cli.zero_shot).

    python scripts/zero_shot.py ckpt=latest blimp_dir=<BLiMP folder> pairs_per_paradigm=100
"""

from cramming.cli.zero_shot import main

if __name__ == "__main__":
    main()
