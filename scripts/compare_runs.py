"""What differs between two pretraining runs: config, code and packages, data, loss curves (the work:
cramming.cli.compare_runs).

    python scripts/compare_runs.py outputs/base/<timestamp> outputs/rerun/<timestamp> --out comparison.png
"""

from cramming.cli.compare_runs import main

if __name__ == "__main__":
    main()
