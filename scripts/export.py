"""Export a checkpoint so `transformers` loads it (the work: cramming.model.export).

    python scripts/export.py ckpt=outputs/<name>/<timestamp>/checkpoints/final out=exported/my-cram
"""

from cramming.cli.export import main

if __name__ == "__main__":
    main()
