"""The calculator's outputs: a markdown table (printed and written), the same as JSON, and a PNG of
predicted loss against compute with the frontier (or, without a loss fit, size against compute with
the compute-optimal size)."""

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def _si(x: float) -> str:
    for unit, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:.3g}{unit}"
    return f"{x:.3g}"


def markdown(result: dict, rows: int) -> str:
    error = result["speed"]["fit_error"]
    fit_error = f" (fit error {100 * error:.1f}%)" if error is not None else ""
    lines = [
        f"Budget {result['budget_hours']} h on gpu={result['gpu']}, microbatch {result['microbatch_size']}, "
        f"sequence {result['seq_length']}, vocabulary {result['vocab_size']}, MLM rate {result['mlm_rate']}.",
        f"Speed: {result['speed']['source']}{fit_error}.",
        f"Loss: {result['loss_source']}.",
        "",
        "| rank | layers | hidden | heads | FFN | params (non-emb.) | tokens/s | tokens | training FLOPs "
        "| compute-optimal params | loss index | predicted loss |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for i, c in enumerate(result["candidates"][:rows], start=1):
        loss = f"{c['loss']:.3f}" if c["loss"] is not None else "-"
        mark = " **recommended**" if c["recommended"] else ""
        lines.append(
            f"| {i}{mark} | {c['layers']} | {c['hidden']} | {c['heads']} | {c['ffn']} "
            f"| {_si(c['parameters'])} | {_si(c['tokens_per_s'])} | {_si(c['tokens'])} | {c['flops']:.3g} "
            f"| {_si(c['optimal_parameters'])} | {c['loss_index']:.4f} | {loss} |"
        )
    hidden = len(result["candidates"]) - rows
    if hidden > 0:
        lines.append(f"\n({hidden} more candidates in the JSON.)")
    return "\n".join(lines) + "\n"


def write_json(path: Path, result: dict) -> None:
    path.write_text(json.dumps(result, indent=2) + "\n")


def plot(path: Path, result: dict, frontier, rule, runs) -> None:
    """Loss (or size) against training FLOPs: every candidate, the recommended one, the curve they follow."""
    candidates = result["candidates"]
    flops = np.array([c["flops"] for c in candidates])
    span = np.concatenate([flops, [run.compute for run in runs]])
    grid = np.geomspace(span.min() / 2, span.max() * 2, 200)
    best = next(c for c in candidates if c["recommended"])
    fig, ax = plt.subplots(figsize=(7, 4.5))
    if frontier is not None:
        ax.scatter(flops, [c["loss"] for c in candidates], s=14, color="tab:blue",
                   label="candidates (predicted)")
        ax.plot(grid, frontier.loss(grid), color="black", label="frontier L*(C) fitted on runs")
        for run in runs:
            ax.plot(*zip(*run.curve), color="tab:gray", alpha=0.5, lw=1)
            ax.scatter([run.compute], [run.final_loss], color="tab:gray", s=18, marker="x")
        ax.scatter([best["flops"]], [best["loss"]], s=120, marker="*", color="tab:red", label="recommended",
                   zorder=3)
        ax.set_ylabel("MLM loss")
    else:
        ax.scatter(flops, [c["parameters"] for c in candidates], s=14, color="tab:blue", label="candidates")
        ax.plot(grid, rule.optimal_parameters(grid), color="black",
                label=f"compute-optimal size ∝ C^{rule.exponent}")
        ax.scatter([best["flops"]], [best["parameters"]], s=120, marker="*", color="tab:red",
                   label="recommended", zorder=3)
        ax.set_yscale("log")
        ax.set_ylabel("non-embedding parameters")
    ax.set_xscale("log")
    ax.set_xlabel("training FLOPs within the budget")
    ax.set_title(f"{result['budget_hours']} h on {result['gpu']}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
