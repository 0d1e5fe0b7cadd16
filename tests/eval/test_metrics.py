"""Each task's metric against values computed by hand, and the definition of the GLUE average."""

import math

import numpy as np
import pytest

from cramming.eval.tasks.glue import PROTOCOL_NUMBERS, glue_average
from cramming.eval.tasks.registry import task_named


def score(task: str, outputs: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    return task_named(task)().score(outputs, labels)


def _logits(predicted: list[int], classes: int = 2) -> np.ndarray:
    return np.eye(classes)[predicted]  # (N, classes), argmax = predicted


def test_matthews_correlation():
    # TP 1, FN 1, TN 2, FP 0: (1*2 - 0*1) / sqrt(1 * 2 * 2 * 3)
    scores = score("cola", _logits([1, 0, 0, 0]), np.array([1, 1, 0, 0]))
    assert scores == {"matthews": pytest.approx(100 * 2 / math.sqrt(12))}


def test_matthews_is_zero_for_a_constant_prediction():
    assert score("cola", _logits([1, 1, 1, 1]), np.array([1, 0, 1, 0]))["matthews"] == 0.0


def test_f1_and_accuracy():
    # TP 2, FP 1, FN 1: F1 = 2*2 / (2*2 + 1 + 1); 3 of 5 right
    for task in ("mrpc", "qqp"):
        scores = score(task, _logits([1, 0, 0, 1, 1]), np.array([1, 1, 0, 0, 1]))
        assert scores == {"f1": pytest.approx(100 * 4 / 6), "accuracy": pytest.approx(60.0)}


@pytest.mark.parametrize("task", ["sst2", "qnli", "rte", "mnli", "wnli", "swag"])
def test_accuracy(task):
    scores = score(task, _logits([0, 2, 1, 2], classes=3), np.array([0, 1, 1, 2]))
    assert scores == {"accuracy": pytest.approx(75.0)}


def test_pearson_and_spearman():
    # x - mean = (-1, 0, 1), y - mean = (-4/3, -1/3, 5/3): r = 3 / sqrt(2 * 42/9); ranks agree exactly
    scores = score("stsb", np.array([[1.0], [2.0], [3.0]]), np.array([1.0, 2.0, 4.0]))
    assert scores["pearson"] == pytest.approx(100 * 3 / math.sqrt(2 * 42 / 9))
    assert scores["spearman"] == pytest.approx(100.0)
    assert set(scores) == {"pearson", "spearman"}


def test_correlation_of_constant_predictions_is_zero_not_nan():
    assert score("stsb", np.full((3, 1), 2.5), np.array([1.0, 2.0, 4.0])) == {"pearson": 0.0, "spearman": 0.0}


def test_glue_average_is_the_mean_of_the_nine_protocol_numbers():
    assert [split for split, _ in PROTOCOL_NUMBERS] == [
        "mnli-m", "mnli-mm", "sst2", "stsb", "rte", "qnli", "qqp", "mrpc", "cola"
    ]  # fmt: skip
    scores = {
        "mnli-m": {"accuracy": 80.0}, "mnli-mm": {"accuracy": 81.0}, "sst2": {"accuracy": 90.0},
        "stsb": {"pearson": 85.0, "spearman": 0.0}, "rte": {"accuracy": 60.0}, "qnli": {"accuracy": 88.0},
        "qqp": {"f1": 86.0, "accuracy": 0.0}, "mrpc": {"f1": 87.0, "accuracy": 0.0},
        "cola": {"matthews": 45.0}, "wnli": {"accuracy": 0.0},
    }  # fmt: skip
    average, over = glue_average(scores)
    assert average == pytest.approx((80 + 81 + 90 + 85 + 60 + 88 + 86 + 87 + 45) / 9)  # F1, Pearson; no WNLI
    assert over == [split for split, _ in PROTOCOL_NUMBERS]


def test_glue_average_over_the_tasks_that_ran():
    average, over = glue_average({"rte": {"accuracy": 50.0}, "mrpc": {"f1": 80.0, "accuracy": 70.0}})
    assert average == pytest.approx(65.0) and over == ["rte", "mrpc"]
    assert glue_average({"wnli": {"accuracy": 56.3}}) == (None, [])
