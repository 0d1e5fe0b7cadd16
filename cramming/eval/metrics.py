"""The tasks' metrics with scikit-learn and scipy (never `evaluate`: it fetches metric scripts at run time).
Both are imported where a score is computed: every task imports this module, and checking an eval config (at
each `pretrain.py eval=glue` start) should not pay their second of imports.

All scores are percentages, as in the published tables.
"""

import collections
import math
import re
import string
import warnings
from typing import Callable, Hashable, Sequence

import numpy as np


def _correlation(function: Callable, predictions: np.ndarray, labels: np.ndarray) -> float:
    """A correlation in percent; 0 when undefined (constant predictions), like scikit-learn's Matthews."""
    from scipy.stats import ConstantInputWarning  # noqa: PLC0415 -- as said at the top

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConstantInputWarning)
        value = float(function(predictions, labels)[0])
    return 0.0 if math.isnan(value) else 100 * value


def classification_scores(metric: str, predicted: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef  # noqa: PLC0415 -- as said at the top

    if metric == "matthews":
        return {"matthews": 100 * float(matthews_corrcoef(labels, predicted))}
    scores = {"accuracy": 100 * float(accuracy_score(labels, predicted))}
    if metric == "f1":
        scores = {"f1": 100 * float(f1_score(labels, predicted, zero_division=0.0)), **scores}
    if metric == "macro_f1":  # CB: the unweighted mean of every class's F1 (classes never seen count as 0)
        classes = list(range(max(int(labels.max(initial=0)), int(predicted.max(initial=0))) + 1))
        macro = f1_score(labels, predicted, labels=classes, average="macro", zero_division=0.0)
        scores = {"macro_f1": 100 * float(macro), **scores}
    return scores


def regression_scores(predicted: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    from scipy.stats import pearsonr, spearmanr  # noqa: PLC0415 -- as said at the top

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


def grouped_scores(predicted: np.ndarray, labels: np.ndarray, groups: Sequence[Hashable]) -> dict[str, float]:
    """MultiRC's: F1 over every answer (F1a: true is the positive class) and exact match over the questions (a
    question counts when every one of its answers is right); `groups` names each answer's question."""
    from sklearn.metrics import f1_score  # noqa: PLC0415 -- as said at the top

    right = collections.defaultdict(list)
    for group, correct in zip(groups, predicted == labels):
        right[group].append(bool(correct))
    exact = sum(all(answers) for answers in right.values()) / len(right)
    return {"f1a": 100 * float(f1_score(labels, predicted, zero_division=0.0)), "exact_match": 100 * exact}


def normalize_answer(text: str) -> str:
    """The SQuAD normalization ReCoRD's official script uses: lower case, no punctuation, no articles, single
    spaces."""
    text = "".join(character for character in text.lower() if character not in set(string.punctuation))
    return " ".join(re.sub(r"\b(a|an|the)\b", " ", text).split())


def token_f1(prediction: str, gold: str) -> float:
    """F1 of the normalized tokens two answers share (ReCoRD, SQuAD), in [0, 1]."""
    predicted, wanted = normalize_answer(prediction).split(), normalize_answer(gold).split()
    common = sum((collections.Counter(predicted) & collections.Counter(wanted)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(predicted), common / len(wanted)
    return 2 * precision * recall / (precision + recall)


def answer_scores(predictions: Sequence[str], golds: Sequence[Sequence[str]]) -> dict[str, float]:
    """ReCoRD's: per query the best token F1 and exact match of its prediction against any right answer, as
    means over the queries."""
    f1 = [max(token_f1(prediction, gold) for gold in answers) for prediction, answers in zip(predictions, golds)]
    exact = [max(normalize_answer(prediction) == normalize_answer(gold) for gold in answers)
             for prediction, answers in zip(predictions, golds)]
    return {"f1": 100 * sum(f1) / len(f1), "exact_match": 100 * sum(exact) / len(exact)}


def gender_parity(predicted: np.ndarray, pairs: Sequence[Hashable]) -> float:
    """AX-g's: the percentage of pairs (examples that differ only in the gender of a pronoun) predicted alike."""
    by_pair = collections.defaultdict(set)
    for pair, prediction in zip(pairs, predicted.tolist()):
        by_pair[pair].add(prediction)
    return 100 * sum(len(predictions) == 1 for predictions in by_pair.values()) / len(by_pair)


def format_scores(scores: dict[str, dict[str, float]], digits: int = 2) -> str:
    """{"mrpc": {"f1": 81.2, "accuracy": 68.4}} -> "mrpc f1 81.20, mrpc accuracy 68.40"."""
    return ", ".join(
        f"{split} {metric} {value:.{digits}f}"
        for split, values in scores.items()
        for metric, value in values.items()
    )
