"""`eval_glue.py` as a user runs it: a real subprocess on a tiny checkpoint, and its one-line errors (a
sample of each as a real subprocess, the other variants through its main() in this process)."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.commands import in_process

from .conftest import GLUE_DIR

REPO = Path(__file__).resolve().parents[2]


def _eval_glue(*overrides: str, timeout: int = 300) -> subprocess.CompletedProcess:
    env = os.environ | {"PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    command = [sys.executable, str(REPO / "eval_glue.py"), *overrides]
    return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
def test_eval_glue_runs_one_task_on_a_tiny_checkpoint(rte_checkpoint, tmp_path):
    run = _eval_glue(
        f"ckpt={rte_checkpoint}",
        "eval.tasks=[rte]",
        f"eval.data_dir={GLUE_DIR}",
        "eval.max_train_examples=64",
        "eval.epochs=1",
        f"output_dir={tmp_path}",
    )
    assert run.returncode == 0, run.stderr
    console = run.stdout + run.stderr
    assert "rte seed 0 epoch 1/1: train loss" in console
    results = json.loads((tmp_path / "glue_results.json").read_text())
    assert 0.0 <= results["scores"]["rte"]["accuracy"] <= 100.0
    assert results["glue_score_over"] == ["rte"]
    assert results["tasks"]["rte"]["train_examples"] == 64
    assert results["tasks"]["rte"]["eval_examples"] == {"rte": 277}
    assert set(results["protocol_deviations"]) == {"epochs", "max_train_examples"}
    assert results["provenance"]["packages"]["torch"] and results["provenance"]["device"]["type"] in ("cpu", "cuda")
    assert results["runtime"]["compiled"] is (results["provenance"]["device"]["type"] == "cuda")  # eval.compile null
    assert results["checkpoint_provenance"] is None  # this checkpoint was saved without one (not by pretrain.py)
    report = (tmp_path / "glue_results.md").read_text()
    assert "| model | MNLI (m/mm) | SST-2 | STSB | RTE | QNLI | QQP | MRPC | CoLA | Average |" in report
    assert "- `max_train_examples`: 64 (protocol: None)" in report


@pytest.mark.parametrize(
    ("overrides", "message", "real"),
    [  # one case as a real subprocess, the other through the same main() in this process (tests/commands.py)
        (["ckpt=does/not/exist"], "error: ckpt=does/not/exist: no such directory", True),
        (["eval.tasks=[rte,cola2]"], "error: unknown GLUE task 'cola2'; known tasks: cola, sst2, mrpc,", False),
        (["eval.compile=maybe"], "error: eval.compile=maybe: Value 'maybe' is not a valid bool", False),
        (["eval.tasks=[rte,swag]", f"eval.data_dir={GLUE_DIR}"],  # before any fine-tuning, not a skipped task
         f"error: no data for swag: {GLUE_DIR}/SWAG/train.csv not found — the run would leave it out", True),
    ],
)
def test_bad_input_ends_in_one_line(rte_checkpoint, tmp_path, overrides, message, real):
    arguments = (f"ckpt={rte_checkpoint}", f"output_dir={tmp_path}", *overrides)
    run = _eval_glue(*arguments, timeout=120) if real else in_process("eval_glue", *arguments)
    assert run.returncode == 2
    assert "Traceback" not in run.stderr
    assert run.stderr.strip().splitlines()[-1].startswith(message)


def test_a_config_json_asking_for_an_absurd_model_is_one_line_before_any_allocation(rte_checkpoint, tmp_path):
    checkpoint = tmp_path / "giant"
    shutil.copytree(rte_checkpoint, checkpoint)
    config = json.loads((checkpoint / "config.json").read_text())
    config["arch"]["hidden_size"] = 1_000_000_000
    (checkpoint / "config.json").write_text(json.dumps(config))
    run = _eval_glue(f"ckpt={checkpoint}", f"output_dir={tmp_path / 'glue'}", timeout=120)
    assert run.returncode == 2 and "Traceback" not in run.stderr + run.stdout
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: {checkpoint / 'config.json'} sets arch.hidden_size=1000000000, which "
                           f"does not fit the weights in {checkpoint / 'model.safetensors'} (they hold no "
                           "dimension above 2000 (bert.embeddings.word_embeddings.weight [2000, 64]))"), last


def test_missing_checkpoint_argument_ends_in_one_line(tmp_path):
    run = _eval_glue(f"output_dir={tmp_path}", timeout=120)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert run.stderr.strip().splitlines()[-1] == "error: ckpt is required: add ckpt=... to the command"


@pytest.mark.parametrize(("task", "folder", "bad", "message", "real"), [  # one as a real subprocess
    ("stsb", "STS-B", "1e9", "label '1e9' is not a score between 0 and 5", True),
    ("stsb", "STS-B", "-5", "label '-5' is not a score between 0 and 5", False),
    ("rte", "RTE", "maybe", "label 'maybe' is not entailment or not_entailment", False),
])
def test_an_out_of_range_label_is_a_one_line_error_naming_file_line_and_value(rte_checkpoint, tmp_path, task,
                                                                              folder, bad, message, real):
    """A label out of range (STS-B dev scores of 1e9 and -5) is refused, not scored with exit code 0."""
    data = tmp_path / "glue"
    (data / folder).mkdir(parents=True)
    (data / folder / "train.tsv").write_text((GLUE_DIR / folder / "train.tsv").read_text(encoding="utf-8"))
    rows = (GLUE_DIR / folder / "dev.tsv").read_text(encoding="utf-8").split("\n")
    for line in (2, 3):  # two bad rows: more than eval.max_malformed_fraction tolerates in a dev file
        fields = rows[line - 1].split("\t")
        rows[line - 1] = "\t".join([*fields[:-1], bad])
    (data / folder / "dev.tsv").write_text("\n".join(rows))
    arguments = (f"ckpt={rte_checkpoint}", f"eval.tasks=[{task}]", f"eval.data_dir={data}", "eval.epochs=1",
                 "eval.max_train_examples=16", f"output_dir={tmp_path / 'out'}")
    run = _eval_glue(*arguments) if real else in_process("eval_glue", *arguments)
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
    assert run.stderr.strip().splitlines()[-1].startswith(f"error: {data / folder / 'dev.tsv'}, line 2: {message}")


@pytest.mark.parametrize(("tasks", "message", "real"), [  # one as a real subprocess
    ("[cola,sst2,mrpc,stsb,qqp,mnli,qnli,rte]",
     "cola, sst2, mrpc, stsb, qqp, mnli, qnli, rte: nyu-mll/glue from the hub: ", True),
    ("[swag]", "swag: allenai/swag from the hub: ", False),
])
def test_no_data_offline_is_one_short_line_and_leaves_no_output_folder(rte_checkpoint, tmp_path, tasks, message, real):
    """Offline without eval.data_dir, the same hub error was printed 8 times as warnings and 8 times in the error
    (1,100 characters), SWAG's was called a GLUE task's, and outputs/glue/<ts>/ kept only Hydra's config and log."""
    arguments = (f"ckpt={rte_checkpoint}", f"eval.tasks={tasks}", f"output_dir={tmp_path / 'out'}")
    run = _eval_glue(*arguments, timeout=120) if real else in_process("eval_glue", *arguments)
    assert run.returncode == 2 and "Traceback" not in run.stderr and "WARNING" not in run.stdout + run.stderr
    line = run.stderr.strip().splitlines()[-1]
    assert line.startswith(f"error: no data for any requested task ({message}") and "GLUE" not in line
    assert line.count("from the hub") == 1 and line.endswith("eval.data_dir=<folder> reads the tasks' files instead "
                                                              "(docs/glue.md)")
    assert not (tmp_path / "out").exists()


def test_fine_tuning_shows_each_epoch_and_its_evaluation(rte_checkpoint, tmp_path, monkeypatch):
    monkeypatch.setattr("cramming.phase_progress.EVERY_S", 0.0)
    run = in_process("eval_glue", f"ckpt={rte_checkpoint}", "eval.tasks=[rte]", f"eval.data_dir={GLUE_DIR}",
                     "eval.max_train_examples=32", "eval.epochs=1", f"output_dir={tmp_path}")
    assert run.returncode == 0, run.stderr
    output = run.stdout + run.stderr
    assert re.search(r"rte seed 0 epoch 1/1: \d+% \(\d+ of 2 steps\)", output), output
    assert re.search(r"rte seed 0 epoch 1/1: predicting \S+: \d+% \([\d,]+ of 277 examples\)", output), output
