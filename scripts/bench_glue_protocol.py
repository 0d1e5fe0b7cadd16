"""The whole GLUE protocol's time, projected from a short measured slice of each task (the work:
cramming.bench.glue_protocol)."""

from cramming.bench.glue_protocol import main

if __name__ == "__main__":
    main()
