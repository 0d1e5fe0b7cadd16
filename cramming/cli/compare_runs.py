"""What differs between two pretraining runs (config, code and packages, data, loss curves):
`python scripts/compare_runs.py RUN_A RUN_B` or `cramming-compare-runs`.

    python scripts/compare_runs.py outputs/base/<timestamp> outputs/rerun/<timestamp> --out comparison.png
"""

import argparse
import sys
from pathlib import Path

from cramming.errors import CrammingError
from cramming.train.compare import read_run, report


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_a", type=Path, help="a run directory (config.yaml, metrics.jsonl, summary.json)")
    parser.add_argument("run_b", type=Path, help="the run to compare it with")
    parser.add_argument("--out", type=Path, default=Path("run_comparison.png"), help="the loss curves' PNG")
    args = parser.parse_args(argv)
    try:
        print(report(read_run(args.run_a), read_run(args.run_b), args.out))
    except CrammingError as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
