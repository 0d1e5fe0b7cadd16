"""Layout of glue_results.md and the contents of glue_results.json."""

import json

from cramming.eval.report import write_reports
from cramming.eval.tasks.glue import COLUMNS, REFERENCE_ROWS


def _results(deviations=None):
    return {
        "checkpoint": "outputs/tiny/2024-01-01_00-00-00/checkpoints/final",
        "scores_unit": "percent",
        "glue_score": 56.25,
        "glue_score_over": ["rte", "mrpc"],
        "glue_score_missing": ["mnli-m", "mnli-mm", "sst2", "stsb", "qnli", "qqp", "cola"],
        "beyond_glue": {},
        "scores": {"rte": {"accuracy": 52.5}, "mrpc": {"f1": 60.0, "accuracy": 55.0}},
        "tasks": {
            "rte": {
                "status": "ran",
                "scores": {"rte": {"accuracy": 52.5}},
                "seeds": {"0": [{"epoch": 1, "train_loss": 0.7, "scores": {"rte": {"accuracy": 52.5}}}]},
                "train_examples": 100,
                "train_examples_available": 2490,
                "eval_examples": {"rte": 277},
                "missing_evaluations": {},
                "skipped_malformed_rows": {},
                "wall_seconds": 12.34,
            },
            "mrpc": {
                "status": "ran",
                "scores": {"mrpc": {"f1": 60.0, "accuracy": 55.0}},
                "seeds": {"0": [{"epoch": 1, "train_loss": 0.6, "scores": {"mrpc": {"f1": 60.0}}}]},
                "train_examples": 3668,
                "train_examples_available": 3668,
                "eval_examples": {"mrpc": 408},
                "missing_evaluations": {},
                "skipped_malformed_rows": {"MRPC/train.tsv": [17]},
                "wall_seconds": 3.0,
            },
            "qqp": {"status": "missing", "reason": "QQP/train.tsv not found"},
        },
        "hyperparameters": {"seeds": [0]},
        "protocol_deviations": deviations or {},
        "runtime": {"device": "cpu", "precision": "fp32", "torch": "2"},
        "wall_seconds": 15.5,
    }


def test_table_columns_and_rows(tmp_path):
    write_reports(_results(), tmp_path)
    lines = (tmp_path / "glue_results.md").read_text().splitlines()
    header = next(line for line in lines if line.startswith("| model |"))
    assert header == "| model | MNLI (m/mm) | SST-2 | STSB | RTE | QNLI | QQP | MRPC | CoLA | Average |"
    assert COLUMNS[0] == "MNLI (m/mm)" and COLUMNS[-1] == "Average"
    ours = lines[lines.index(header) + 2]
    # MRPC shows F1; the average (56.25) is marked as partial
    assert ours == "| **this checkpoint** | –/– | – | – | 52.5 | – | – | 60.0 | – | 56.2* |"
    for label in REFERENCE_ROWS:
        assert any(line.startswith(f"| {label} |") for line in lines)
    bert_base = "| BERT-base, fully trained | " + "83.2/83.4 | 91.9 | 86.7 | 59.2 | 90.6 | 87.7 | 89.3 | 56.5 | 80.9 |"
    assert bert_base in lines
    text = "\n".join(lines)
    assert "Average over the 2 of 9 protocol numbers that ran (rte, mrpc)" in text
    assert "None: the fixed GLUE hyperparameters of the protocol." in text


def test_tasks_wall_time_missing_tasks_and_data_notes(tmp_path):
    write_reports(_results(), tmp_path)
    text = (tmp_path / "glue_results.md").read_text()
    assert "| rte | ran | rte accuracy 52.5 | 100 / 277 | 12.3 s |" in text
    assert "| mrpc | ran | mrpc f1 60.0, mrpc accuracy 55.0 | 3668 / 408 | 3.0 s |" in text
    assert "| qqp | missing: QQP/train.tsv not found | | | |" in text
    assert "- mrpc: skipped 1 malformed rows of MRPC/train.tsv (lines [17])" in text
    assert "- rte: trained on 100 of 2490 examples (eval.max_train_examples)" in text
    assert "- rte seed 0 epoch 1: train loss 0.7000; rte accuracy 52.50" in text


def test_deviations_are_reported(tmp_path):
    write_reports(_results({"epochs": {"protocol": 5, "used": 1}}), tmp_path)
    text = (tmp_path / "glue_results.md").read_text()
    assert "- `epochs`: 1 (protocol: 5)" in text
    assert "not** comparable" in text


def test_json_holds_the_results(tmp_path):
    results = _results()
    write_reports(results, tmp_path)
    assert json.loads((tmp_path / "glue_results.json").read_text()) == results


def test_only_tasks_a_server_scores_name_a_leaderboard():
    """GLUE's nine zip for GLUE and SuperGLUE's for SuperGLUE; RACE, SWAG and local tasks name none, so they do not
    inherit one by mistake."""
    from cramming.eval.tasks.glue import GlueTask
    from cramming.eval.tasks.registry import TASKS
    from cramming.eval.tasks.superglue import SuperGlueTask

    for task in TASKS:
        expected = "GLUE" if issubclass(task, GlueTask) else "SuperGLUE" if issubclass(task, SuperGlueTask) else None
        assert task.leaderboard == expected, task.name
    assert {task.name for task in TASKS if task.leaderboard is None} >= {"race", "swag", "local"}
