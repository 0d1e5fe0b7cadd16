"""GLUE fine-tuning speed with and without unpadding, side by side in one process (the work:
cramming.bench.glue_speed)."""

from cramming.bench.glue_speed import main

if __name__ == "__main__":
    main()
