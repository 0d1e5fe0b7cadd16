"""The calculator's outputs: a markdown table (printed and written) with what the recommended shape is against
the compute-optimal size and the overrides that train it, the same as JSON, and a PNG of what the ranking
minimizes against compute (predicted loss with the frontier, or without a loss fit the loss index with its
compute-optimal least), the recommended shape its lowest point."""

import json
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from cramming.calculator.loss_model import optimal_excess  # noqa: E402

NEAR_OPTIMAL = (0.8, 1.25)  # a size this near the compute-optimal one for its FLOPs is said to be at it


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
    lines += ["", why_recommended(result["candidates"]), "", f"Train it: `{train_command(result)}`"]
    return "\n".join(lines) + "\n"


def shape_overrides(candidate: dict) -> str:
    return (f"arch.num_layers={candidate['layers']} arch.hidden_size={candidate['hidden']} "
            f"arch.num_heads={candidate['heads']} arch.intermediate_size={candidate['ffn']}")


def train_command(result: dict) -> str:
    """The pretraining command of the recommended shape on this budget and GPU."""
    best = next(c for c in result["candidates"] if c["recommended"])
    return f"python pretrain.py budget={result['budget_hours']:g} gpu={result['gpu']} {shape_overrides(best)}"


def why_recommended(candidates: list[dict]) -> str:
    """The recommended shape against the compute-optimal size at its FLOPs (the table's column); where it is
    larger or smaller, the best shape near its own compute-optimal size and why it ranks lower: less compute
    in the same hours, as this GPU runs some shapes at more FLOP/s than others."""
    best = next(c for c in candidates if c["recommended"])
    metric = "predicted loss" if best["loss"] is not None else "loss index"

    def value(c):
        return f"{c['loss']:.3f}" if c["loss"] is not None else f"{c['loss_index']:.4f}"

    def size(c):
        return c["parameters"] / c["optimal_parameters"]

    said = (f"Recommended: {best['layers']} x {best['hidden']} ({_si(best['parameters'])} non-embedding "
            f"parameters), {size(best):.2g}x the compute-optimal size for the {best['flops']:.3g} FLOPs it gets in "
            f"the budget ({_si(best['optimal_parameters'])}, the table's column).")
    near = [c for c in candidates if NEAR_OPTIMAL[0] <= size(c) <= NEAR_OPTIMAL[1]]
    if best in near:
        return said
    other = near[0] if near else min(candidates, key=lambda c: abs(math.log(size(c))))  # ranked: near[0] is best
    if other is best:  # no candidate near its optimum, and the recommended is the closest: the grid's edge binds
        other_way = "smaller" if size(best) > 1 else "larger"
        return (f"{said} No candidate is within {NEAR_OPTIMAL[0]:g}x to {NEAR_OPTIMAL[1]:g}x of its compute-optimal "
                f"size: this is the closest, at the grid's edge; a {other_way} shape than the grid holds "
                "(candidates.depths, candidates.widths) may rank better.")
    return (f"{said} The {metric} counts both size and compute: the best shape near its own compute-optimal size, "
            f"{other['layers']} x {other['hidden']} ({size(other):.2g}x), gets "
            f"{best['flops'] / other['flops']:.2g}x fewer FLOPs in these hours ({other['flops']:.3g}: this device's "
            f"speed model runs some shapes at more FLOP/s than others) and ranks lower, {value(other)} against "
            f"{value(best)}.")


def write_json(path: Path, result: dict) -> None:
    path.write_text(json.dumps(result, indent=2) + "\n")


def plot(path: Path, result: dict, frontier, rule, runs, alpha: float) -> None:
    """What the ranking minimizes against training FLOPs: every candidate, the least any shape reaches at each
    compute (a shape of the compute-optimal size: the frontier with runs), and the recommended shape, the
    lowest point. A candidate sits above the line by how far its size is from the compute-optimal one for the
    FLOPs it gets; the table's column gives that size."""
    candidates = result["candidates"]
    flops = np.array([c["flops"] for c in candidates])
    span = np.concatenate([flops, [run.compute for run in runs]])
    grid = np.geomspace(span.min() / 2, span.max() * 2, 200)
    best = next(c for c in candidates if c["recommended"])
    fig, ax = plt.subplots(figsize=(7, 4.5))
    if frontier is not None:
        key = "loss"
        ax.plot(grid, frontier.loss(grid), color="black",
                label="frontier L*(C) fitted on runs: at the compute-optimal size")
        for run in runs:
            ax.plot(*zip(*run.curve), color="tab:gray", alpha=0.5, lw=1)
            ax.scatter([run.compute], [run.final_loss], color="tab:gray", s=18, marker="x")
        ax.set_ylabel("predicted MLM loss")
    else:
        key = "loss_index"
        ax.plot(grid, optimal_excess(rule, alpha, grid), color="black",
                label=f"at the compute-optimal size (∝ C^{rule.exponent})")
        ax.set_ylabel("loss index (excess loss; 1 = the anchor's)")
    ax.scatter(flops, [c[key] for c in candidates], s=14, color="tab:blue", label="candidates (predicted)")
    ax.scatter([best["flops"]], [best[key]], s=120, marker="*", color="tab:red", zorder=3,
               label=f"recommended: {best['layers']} x {best['hidden']}, the lowest")
    ax.set_xscale("log")
    ax.set_xlabel("training FLOPs within the budget")
    ax.set_title(f"{result['budget_hours']} h on {result['gpu']}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
