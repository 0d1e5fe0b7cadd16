"""What differs between two pretraining runs (config, code and packages, data, loss curves):
`python scripts/compare_runs.py RUN_A RUN_B` or `cramming-compare-runs`.

    python scripts/compare_runs.py outputs/base/<timestamp> outputs/rerun/<timestamp> --out comparison.png

The loss curves' plot goes to outputs/comparisons/<timestamp>-runs.png unless --out names another file.
"""

import argparse
from pathlib import Path

from cramming.errors import exit_on_user_error
from cramming.runs import comparison_path
from cramming.train.compare import read_run, report


@exit_on_user_error
def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_a", type=Path, help="a run directory (config.yaml, metrics.jsonl, summary.json)")
    parser.add_argument("run_b", type=Path, help="the run to compare it with")
    parser.add_argument("--out", type=Path,
                        help="the loss curves' PNG (default: outputs/comparisons/<timestamp>-runs.png)")
    args = parser.parse_args(argv)
    print(report(read_run(args.run_a), read_run(args.run_b), args.out or comparison_path("runs")))


if __name__ == "__main__":
    main()
