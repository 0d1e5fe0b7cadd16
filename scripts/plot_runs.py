"""Overlay the loss curves of several pretraining runs (the work: cramming.train.plots).

    python scripts/plot_runs.py outputs/base/<timestamp> outputs/ablation-lr/<timestamp> --out comparison.png
"""

from cramming.cli.plot_runs import main

if __name__ == "__main__":
    main()
