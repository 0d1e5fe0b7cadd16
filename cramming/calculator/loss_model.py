"""Predicted MLM loss: a loss-against-compute frontier fitted on the user's runs, and the reference
study's compute-optimal size rule (size ∝ compute^0.87), which together give the loss of any size.

Frontier: L*(C) = a · (C / C0)^(−α) + c, fitted on each run's final loss at its total training FLOPs C
(C0 normalizes; it is the geometric mean of the runs' compute). With the size rule N_opt(C) = N_ref ·
(C / C_ref)^p and the usual split L = c + A·N^(−α/p) + B·(C/N)^(−α/(1−p)) (C/N stands for the data, as
in C = 6·N·D), the frontier fixes A and B: L(N, C) = c + a' · [p·n^(−α/p) + (1 − p)·(c/n)^(−α/(1−p))],
with n = N/N_ref, c = C/C_ref and a' = a·(C_ref/C0)^(−α). C is counted in one unit everywhere, the
training FLOPs the runs, the anchor and the candidates spend (cramming.model.training_flops_per_token):
over N at a given C, L(N, C) is least exactly at N_opt(C), where it equals L*(C); a shape too large or
too small for its compute lands above the frontier.
"""

import glob
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from omegaconf import OmegaConf
from scipy.optimize import least_squares

from cramming.data.store import EXECUTION_ONLY_KEYS
from cramming.errors import CrammingError
from cramming.model import training_flops_per_token
from cramming.model.config import as_model_config
from cramming.train.runs import CONFIG_FILE, flatten, run_config

from .speed_model import non_embedding_parameters

SIZE_EXPONENT = 0.87  # reference study: 10x compute -> 7.4x size, 1.35x steps


@dataclass
class RunPoint:
    """One pretraining run, reduced to what the fit needs."""

    path: str  # its metrics.jsonl
    name: str
    parameters: int  # non-embedding
    compute: float  # training FLOPs to its last record
    final_loss: float
    curve: list  # (compute, loss) per record, for the plot
    data: dict  # its data config, flattened (corpus, filters, tokenizer): runs fitted together share it


@dataclass(frozen=True)
class Frontier:
    a: float
    alpha: float
    c: float
    c0: float  # FLOPs

    def loss(self, compute):
        return self.a * (np.asarray(compute, dtype=float) / self.c0) ** -self.alpha + self.c


@dataclass(frozen=True)
class SizeRule:
    """N_opt(C) = params · (C / compute)^exponent, anchored at a shape known to suit its compute."""

    params: float
    compute: float  # FLOPs
    exponent: float = SIZE_EXPONENT

    def optimal_parameters(self, compute):
        return self.params * (np.asarray(compute, dtype=float) / self.compute) ** self.exponent


def expand_runs(runs) -> list[Path]:
    """`runs` as a glob string or a list of paths/globs; directories mean their metrics.jsonl."""
    patterns = [runs] if isinstance(runs, str) else list(runs or [])
    paths = []
    for pattern in patterns:
        for match in sorted(glob.glob(str(Path(pattern).expanduser()))) or []:
            path = Path(match)
            paths.append(path / "metrics.jsonl" if path.is_dir() else path)
    if patterns and not paths:
        raise CrammingError(f"runs={runs!r} matched no metrics.jsonl")
    return paths


def read_run(metrics_path: Path) -> RunPoint:
    """A run's records and compute, from metrics.jsonl and the config.yaml beside it."""
    if not metrics_path.is_file() or not (metrics_path.parent / CONFIG_FILE).is_file():
        raise CrammingError(f"{metrics_path.parent} needs metrics.jsonl and config.yaml (a pretraining run)")
    config = run_config(metrics_path.parent)  # the config the run trained with last
    arch = as_model_config(config.arch)
    flops_per_token = training_flops_per_token(arch, int(config.data.tokenizer.vocab_size),
                                               int(config.data.seq_length), float(config.train.mlm_rate))
    records = [json.loads(line) for line in metrics_path.read_text().splitlines() if line.strip()]
    if not records:
        raise CrammingError(f"{metrics_path} has no records")
    curve = [(r["tokens"] * flops_per_token, r["loss"]) for r in records]
    data = {key: value for key, value in flatten(OmegaConf.to_container(config.data, resolve=True), "data").items()
            if key.split(".")[-1] not in EXECUTION_ONLY_KEYS}
    return RunPoint(str(metrics_path), metrics_path.parent.parent.name, non_embedding_parameters(arch),
                    curve[-1][0], curve[-1][1], curve, data)


def check_same_data(points: list[RunPoint]) -> None:
    """One frontier is one corpus and one tokenizer: losses over other text or another vocabulary are not on it
    (a fit across both gave held-out errors of 2 nats). CrammingError naming the first difference."""
    first = points[0]
    for point in points[1:]:
        changed = next((key for key in sorted(set(first.data) | set(point.data))
                        if first.data.get(key) != point.data.get(key)), None)
        if changed is not None:
            raise CrammingError(
                f"runs= mixes runs on different data or tokenizers ({changed}={first.data.get(changed)} in "
                f"{Path(first.path).parent}, {point.data.get(changed)} in {Path(point.path).parent}): a loss fit "
                "needs runs on the same data and tokenizer; choose them with runs=")


def fit_frontier(compute, loss) -> Frontier:
    """Least squares of L = a·(C/C0)^(−α) + c on final losses; c kept between 0 and the lowest loss."""
    compute, loss = np.asarray(compute, dtype=float), np.asarray(loss, dtype=float)
    if compute.size < 3:
        raise CrammingError(f"the loss fit needs at least 3 runs, got {compute.size}")
    c0 = float(np.exp(np.mean(np.log(compute))))
    x = compute / c0

    def residuals(p):  # p = (ln a, α, c)
        return math.exp(p[0]) * x ** -p[1] + p[2] - loss

    low = float(loss.min())
    p0 = [math.log(max(float(loss.mean()) - 0.5 * low, 1e-3)), 0.3, 0.5 * low]
    fit = least_squares(residuals, p0, bounds=([-20, 1e-3, 0.0], [20, 3.0, low * (1 - 1e-6)]))
    return Frontier(a=math.exp(fit.x[0]), alpha=float(fit.x[1]), c=float(fit.x[2]), c0=c0)


def leave_one_out(points: list[RunPoint]) -> list[tuple[str, float, float]]:
    """For each run: its final loss and the loss the frontier fitted on the other runs predicts for it."""
    results = []
    for i, held_out in enumerate(points):
        rest = points[:i] + points[i + 1:]
        frontier = fit_frontier([p.compute for p in rest], [p.final_loss for p in rest])
        results.append((held_out.name, held_out.final_loss, float(frontier.loss(held_out.compute))))
    return results


def excess_loss(rule: SizeRule, alpha: float, parameters, compute):
    """p·n^(−α/p) + (1 − p)·(c/n)^(−α/(1−p)) (module docstring): loss above c in units of the anchor's, at
    `compute` training FLOPs; (C/C_ref)^(−α) at the compute-optimal size (`optimal_excess`), more at any other.

    Ranks shapes without absolute losses: it needs only the frontier's exponent α."""
    p = rule.exponent
    n = np.asarray(parameters, dtype=float) / rule.params
    c = np.asarray(compute, dtype=float) / rule.compute
    return p * n ** (-alpha / p) + (1 - p) * (c / n) ** (-alpha / (1 - p))


def optimal_excess(rule: SizeRule, alpha: float, compute):
    """excess_loss at the compute-optimal size: the least any shape reaches with `compute` training FLOPs."""
    return (np.asarray(compute, dtype=float) / rule.compute) ** -alpha


def predicted_loss(frontier: Frontier, rule: SizeRule, parameters, compute):
    """L(N, C) from the frontier and the size rule (module docstring); equals L*(C) at N = N_opt(C)."""
    scale = frontier.a * (rule.compute / frontier.c0) ** -frontier.alpha
    return frontier.c + scale * excess_loss(rule, frontier.alpha, parameters, compute)
