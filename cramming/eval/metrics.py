"""The tasks' metrics with scikit-learn and scipy (never `evaluate`: it fetches metric scripts at run time).

All scores are percentages, as in the published tables.
"""

import math
import warnings
from typing import Callable

import numpy as np
from scipy.stats import ConstantInputWarning, pearsonr, spearmanr
from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef


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


def score(metric: str, outputs: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """Scores led by `metric` from a model's outputs: logits (N, C), or (N, 1) scores for pearson; the others
    logged beside it (accuracy beside F1, Spearman beside Pearson)."""
    if metric == "pearson":
        return regression_scores(outputs.reshape(-1), labels)
    return classification_scores(metric, outputs.argmax(axis=-1), labels)


def format_scores(scores: dict[str, dict[str, float]], digits: int = 2) -> str:
    """{"mrpc": {"f1": 81.2, "accuracy": 68.4}} -> "mrpc f1 81.20, mrpc accuracy 68.40"."""
    return ", ".join(
        f"{split} {metric} {value:.{digits}f}"
        for split, values in scores.items()
        for metric, value in values.items()
    )
