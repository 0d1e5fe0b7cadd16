"""Overlay the loss curves of several pretraining runs, against training time and against tokens:
`python scripts/plot_runs.py` or `cramming-plot-runs`.

    python scripts/plot_runs.py outputs/base/2026-01-01_10-00-00 outputs/ablation-lr/2026-01-02_09-00-00
    python scripts/plot_runs.py outputs/a/* outputs/b/* --out comparison.png

Each argument is a run directory (the one holding metrics.jsonl). The plot goes to
outputs/comparisons/<timestamp>-loss.png unless --out names another file; its path is printed, and where the
runs' MLM losses do not compare (another tokenizer or mask rate), a note that says so.
"""

import argparse
from pathlib import Path

from cramming.errors import exit_on_user_error
from cramming.train.plots import loss_note, plot_comparison
from cramming.train.runs import comparison_path, loss_basis


@exit_on_user_error
def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="run directories (each with a metrics.jsonl)")
    parser.add_argument("--out", type=Path, help="the PNG to write (default: outputs/comparisons/<timestamp>-loss.png)")
    args = parser.parse_args(argv)
    print(f"wrote {plot_comparison(args.runs, args.out or comparison_path('loss'))}")
    if note := loss_note([(str(run), loss_basis(run)) for run in args.runs]):
        print(f"note: {note}")


if __name__ == "__main__":
    main()
