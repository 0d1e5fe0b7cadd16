"""GLUE metrics with scikit-learn and scipy (never `evaluate`: it fetches metric scripts at run time).

All scores are percentages, as in the published tables.
"""

import math
import warnings
from typing import Callable, Optional

import numpy as np
from scipy.stats import ConstantInputWarning, pearsonr, spearmanr
from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

# The nine numbers whose mean is the GLUE score: (evaluation split, metric), in table order.
PROTOCOL_NUMBERS: tuple[tuple[str, str], ...] = (
    ("mnli-m", "accuracy"),
    ("mnli-mm", "accuracy"),
    ("sst2", "accuracy"),
    ("stsb", "pearson"),
    ("rte", "accuracy"),
    ("qnli", "accuracy"),
    ("qqp", "f1"),
    ("mrpc", "f1"),
    ("cola", "matthews"),
)


def _correlation(function: Callable, predictions: np.ndarray, labels: np.ndarray) -> float:
    """A correlation in percent; 0 when undefined (constant predictions), like scikit-learn's Matthews."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConstantInputWarning)
        value = float(function(predictions, labels)[0])
    return 0.0 if math.isnan(value) else 100 * value


def classification_scores(metric: str, predicted: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    if metric == "matthews":
        return {"matthews": 100 * float(matthews_corrcoef(labels, predicted))}
    scores = {"accuracy": 100 * float(accuracy_score(labels, predicted))}
    if metric == "f1":
        scores = {"f1": 100 * float(f1_score(labels, predicted, zero_division=0.0)), **scores}
    return scores


def regression_scores(predicted: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    return {
        "pearson": _correlation(pearsonr, predicted, labels),
        "spearman": _correlation(spearmanr, predicted, labels),
    }


# Main metric of each evaluation split (the one in the table); the others are logged beside it.
MAIN_METRIC = {split: metric for split, metric in PROTOCOL_NUMBERS} | {"wnli": "accuracy"}


def score(split: str, outputs: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """Scores of one evaluation split from the head's outputs: logits (N, C), or (N, 1) for STS-B."""
    metric = MAIN_METRIC[split]
    if metric == "pearson":
        return regression_scores(outputs.reshape(-1), labels)
    return classification_scores(metric, outputs.argmax(axis=-1), labels)


def glue_average(scores: dict[str, dict[str, float]]) -> tuple[Optional[float], list[str]]:
    """Mean of the protocol numbers present in `scores` (by split), and the splits it averaged."""
    present = [(split, metric) for split, metric in PROTOCOL_NUMBERS if split in scores]
    if not present:
        return None, []
    return sum(scores[split][metric] for split, metric in present) / len(present), [s for s, _ in present]


def format_scores(scores: dict[str, dict[str, float]], digits: int = 2) -> str:
    """{"mrpc": {"f1": 81.2, "accuracy": 68.4}} -> "mrpc f1 81.20, mrpc accuracy 68.40"."""
    return ", ".join(
        f"{split} {metric} {value:.{digits}f}"
        for split, values in scores.items()
        for metric, value in values.items()
    )
