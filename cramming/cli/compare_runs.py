"""What differs between two pretraining runs (config, code and packages, data, loss curves):
`python scripts/compare_runs.py RUN_A RUN_B` or `cramming-compare-runs`.

    python scripts/compare_runs.py outputs/base/<timestamp> outputs/rerun/<timestamp> --out comparison.png

The loss curves' plot goes to outputs/comparisons/<timestamp>-runs.png unless --out names another file.
"""

import argparse
from dataclasses import dataclass
from pathlib import Path

from omegaconf import OmegaConf

from cramming.errors import CrammingError, exit_on_user_error
from cramming.files import read_json_object
from cramming.train.plots import loss_note, plot_comparison
from cramming.train.runs import comparison_path, differences, loss_basis, read_records, run_checkpoint, run_config

CURVE_ROWS = 12  # steps shown side by side


@dataclass
class RunRecord:
    path: Path
    config: dict
    provenance: dict | None  # None: written by a version that did not record it, or killed before a checkpoint
    records: list[dict]


def read_run(run_dir: Path) -> RunRecord:
    """A run directory's resolved config (the one it trained with last), provenance (summary.json, else its
    newest checkpoint) and records; a directory without config.yaml or metrics.jsonl is an error."""
    config = OmegaConf.to_container(run_config(run_dir))
    if not (run_dir / "metrics.jsonl").is_file():  # an empty one (no step logged yet) is a run, compared as such
        raise CrammingError(f"{run_dir}: no metrics.jsonl; is it a pretraining run directory? (a run writes it at "
                            "its first logged step)")
    provenance = None
    if (run_dir / "summary.json").is_file():
        provenance = read_json_object(run_dir / "summary.json").get("provenance")
    elif checkpoint := run_checkpoint(run_dir):
        provenance = read_json_object(checkpoint / "config.json").get("provenance")
    return RunRecord(run_dir, config, provenance, read_records(run_dir / "metrics.jsonl"))


def curve_rows(a: list[dict], b: list[dict], rows: int = CURVE_ROWS) -> list[tuple[int, float, float]]:
    """Losses at up to `rows` steps both runs logged, spread evenly and the last one included."""
    losses_a, losses_b = {r["step"]: r["loss"] for r in a}, {r["step"]: r["loss"] for r in b}
    common = sorted(set(losses_a) & set(losses_b))
    if not common:
        return []
    shown = min(rows, len(common))
    chosen = sorted({common[round(i * (len(common) - 1) / max(shown - 1, 1))] for i in range(shown)})
    return [(step, losses_a[step], losses_b[step]) for step in chosen]


def zero_shot_rows(a: list[dict], b: list[dict]) -> list[str]:
    """The last bits per character (first: it compares across tokenizers and mask rates) and BLiMP each run
    measured (train.validation.zero_shot), side by side."""
    lines = []
    for key, title in (("bits_per_char", "held-out bits per character"), ("blimp", "BLiMP, packaged subset (%)")):
        last = [next((r for r in reversed(records) if key in r), None) for records in (a, b)]
        if any(record is not None for record in last):
            shown = [f"{r[key]:.4f} (step {r['step']})" if r else "not measured" for r in last]
            change = f" ({last[1][key] - last[0][key]:+.4f})" if all(last) else ""
            lines.append(f"{title}: {shown[0]} | {shown[1]}{change}")
    return ["", *lines] if lines else []


def report(a: RunRecord, b: RunRecord, plot: Path | None) -> str:
    """The comparison as text: config, code and environment, data, and the loss curves side by side."""
    lines = [f"A: {a.path}", f"B: {b.path}", ""]
    config = [(key, va, vb) for key, va, vb in differences(a.config, b.config) if key != "output_dir"]
    lines.append(f"config: {len(config)} key(s) differ" if config else "config: the same")
    lines += [f"  {key}: {va} | {vb}" for key, va, vb in config]
    if a.provenance is None or b.provenance is None:
        lines.append("code and environment: unknown for " + " and ".join(
            name for name, run in (("A", a), ("B", b)) if run.provenance is None) + " (no provenance recorded)")
    else:
        environment = [(k, va, vb) for k, va, vb in differences(a.provenance, b.provenance)
                       if k not in ("dataset", "config_sha256")]  # shown in their own sections
        lines.append(f"code and environment: {len(environment)} difference(s)" if environment else
                     "code and environment: the same")
        lines += [f"  {key}: {va} | {vb}" for key, va, vb in environment]
        data = (a.provenance.get("dataset"), b.provenance.get("dataset"))
        lines.append(f"data: {data[0]}" + (" (the same)" if data[0] == data[1] else f" | {data[1]}"))
    lines += zero_shot_rows(a.records, b.records)
    rows = curve_rows(a.records, b.records)
    lines += ["", "loss by step: A | B (B - A)"] if rows else ["", "loss: no step logged by both runs"]
    if rows and (note := loss_note([("A", loss_basis(a.path)), ("B", loss_basis(b.path))])):
        lines.append(f"  ({note})")
    lines += [f"  {step}: {la:.4f} | {lb:.4f} ({lb - la:+.4f})" for step, la, lb in rows]
    if plot is not None and a.records and b.records:
        lines.append(f"plot: {plot_comparison([a.path, b.path], plot)}")
    return "\n".join(lines)


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
