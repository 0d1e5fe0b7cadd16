"""What differs between two pretraining runs: config keys, code and package versions, data, loss curves.

The question a user asks when a run does not reproduce another: which setting, which package, which
dataset changed, and where do the curves part.
"""

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from cramming.files import read_json_object
from cramming.runs import run_checkpoint, run_config
from cramming.train.plots import plot_comparison
from cramming.train.summary import read_records

CURVE_ROWS = 12  # steps shown side by side


@dataclass
class RunRecord:
    path: Path
    config: dict
    provenance: dict | None  # None: written by a version that did not record it, or killed before a checkpoint
    records: list[dict]


def read_run(run_dir: Path) -> RunRecord:
    """A run directory's resolved config (the one it trained with last), provenance (summary.json, else its
    newest checkpoint) and records."""
    config = OmegaConf.to_container(run_config(run_dir))
    provenance = None
    if (run_dir / "summary.json").is_file():
        provenance = read_json_object(run_dir / "summary.json").get("provenance")
    elif checkpoint := run_checkpoint(run_dir):
        provenance = read_json_object(checkpoint / "config.json").get("provenance")
    return RunRecord(run_dir, config, provenance, read_records(run_dir / "metrics.jsonl"))


def flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    """{"train": {"optim": {"lr": 1e-3}}} -> {"train.optim.lr": 1e-3}."""
    if not isinstance(tree, dict):
        return {prefix: tree}
    flat = {}
    for key, value in tree.items():
        flat.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    return flat


def differences(a: Any, b: Any) -> list[tuple[str, Any, Any]]:
    """(key, value in a, value in b) for every key whose values differ, a key missing on one side included."""
    flat_a, flat_b = flatten(a), flatten(b)
    keys = sorted(set(flat_a) | set(flat_b))
    return [(key, flat_a.get(key, "(absent)"), flat_b.get(key, "(absent)")) for key in keys
            if flat_a.get(key, "(absent)") != flat_b.get(key, "(absent)")]


def curve_rows(a: list[dict], b: list[dict], rows: int = CURVE_ROWS) -> list[tuple[int, float, float]]:
    """Losses at up to `rows` steps both runs logged, spread evenly and the last one included."""
    losses_a, losses_b = {r["step"]: r["loss"] for r in a}, {r["step"]: r["loss"] for r in b}
    common = sorted(set(losses_a) & set(losses_b))
    if not common:
        return []
    shown = min(rows, len(common))
    chosen = sorted({common[round(i * (len(common) - 1) / max(shown - 1, 1))] for i in range(shown)})
    return [(step, losses_a[step], losses_b[step]) for step in chosen]


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
    rows = curve_rows(a.records, b.records)
    lines += ["", "loss by step: A | B (B - A)"] if rows else ["", "loss: no step logged by both runs"]
    lines += [f"  {step}: {la:.4f} | {lb:.4f} ({lb - la:+.4f})" for step, la, lb in rows]
    if plot is not None and a.records and b.records:
        lines.append(f"plot: {plot_comparison([a.path, b.path], plot)}")
    return "\n".join(lines)
