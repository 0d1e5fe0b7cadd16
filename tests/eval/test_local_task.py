"""A user's own data as a task (`eval.tasks=[local]`, `eval.local.*`): real TSV and CSV files written here,
fine-tuned and scored beside the GLUE score, the kept model scoring what was reported, and each bad file or
setting one line naming it."""

import csv
import json
import random
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer

from cramming.eval.run import run_glue
from tests.commands import in_process, in_subprocess

from .conftest import make_checkpoint
from .test_run_glue import FILLERS, NEGATIVE, POSITIVE, _sentence

LABELS = ["negative", "positive"]


def reviews(count: int, seed: int) -> list[tuple[str, str, str]]:
    """(id, review, sentiment): the review holds a positive or a negative word, as its sentiment says."""
    rng = random.Random(seed)
    rows = []
    for index in range(count):
        positive = rng.random() < 0.5
        rows.append((f"r{index}", _sentence(rng, rng.choice(POSITIVE if positive else NEGATIVE)), LABELS[positive]))
    return rows


def write_tsv(path: Path, rows: list, header: tuple = ("id", "review", "sentiment")) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join("\t".join(row) + "\n" for row in [header, *rows]))
    return path


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    texts = [" ".join(FILLERS + POSITIVE + NEGATIVE)] * 20
    return make_checkpoint(tmp_path_factory.mktemp("local") / "checkpoint", texts, vocab_size=100)


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """<folder>/{train,dev}.tsv with an id, a review and a sentiment column."""
    root = tmp_path_factory.mktemp("reviews")
    write_tsv(root / "train.tsv", reviews(64, seed=0))
    write_tsv(root / "dev.tsv", reviews(24, seed=1))
    return root


SETTINGS = ("eval.local.text_columns=[review]", "eval.local.label_column=sentiment",
            "eval.local.labels=[negative,positive]")


@pytest.mark.slow
def test_eval_glue_scores_a_tsv_folder_beside_glue_and_keeps_the_model_that_scored(checkpoint, folder, tmp_path):
    run = in_subprocess("eval_glue", f"ckpt={checkpoint}", "eval.tasks=[local]", *SETTINGS,
                        f"eval.local.folder={folder}", "eval.epochs=1", "eval.save_models=true",
                        f"output_dir={tmp_path}", timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    console = run.stdout + run.stderr
    assert "local: 64 train examples, evaluation on local (24)" in console and "LOCAL accuracy" in console
    results = json.loads((tmp_path / "glue_results.json").read_text())
    assert results["glue_score"] is None and results["beyond_glue"] == {"local": "accuracy"}
    assert set(results["scores"]) == {"local"} and set(results["scores"]["local"]) == {"accuracy"}
    assert results["hyperparameters"]["local"]["labels"] == LABELS
    report = (tmp_path / "glue_results.md").read_text()
    assert "| model | LOCAL (accuracy, validation) |" in report

    kept = tmp_path / "models" / "local-seed0"
    model = AutoModelForSequenceClassification.from_pretrained(kept, trust_remote_code=True).eval()
    tokenizer = AutoTokenizer.from_pretrained(kept, trust_remote_code=True)
    dev = reviews(24, seed=1)
    with torch.no_grad():
        logits = model(**tokenizer([review for _, review, _ in dev], padding=True, return_tensors="pt")).logits
    gold = torch.tensor([LABELS.index(sentiment) for _, _, sentiment in dev])
    accuracy = 100 * (logits.argmax(-1) == gold).float().mean().item()
    assert accuracy == pytest.approx(results["scores"]["local"]["accuracy"], abs=1e-3)  # label ids in list order


def test_a_csv_folder_of_text_pairs_with_a_score_is_a_regression(checkpoint, tmp_path):
    """Quoted CSV fields (commas, quotes, a line break), two text columns, a number as the label: pearson."""
    rng = random.Random(0)
    for name, count in (("train", 32), ("dev", 16)):
        rows = [["first", "second", "similarity"]]
        for _ in range(count):
            first = _sentence(rng, rng.choice(POSITIVE))
            rows.append([f'{first}, "quoted"', f"{_sentence(rng, 'good')}\nand more", f"{rng.uniform(-1, 3):.2f}"])
        with open(tmp_path / f"{name}.csv", "w", newline="") as file:
            csv.writer(file).writerows(rows)
    settings = {"tasks": ["local"], "epochs": 1, "local": {"folder": str(tmp_path), "text_columns": ["first", "second"],
                                                           "label_column": "similarity", "metric": "pearson"}}
    results = run_glue(settings, checkpoint, tmp_path / "out")
    assert set(results["scores"]["local"]) == {"pearson", "spearman"}
    assert results["beyond_glue"] == {"local": "pearson"} and results["glue_score"] is None
    assert (results["tasks"]["local"]["eval_examples"] == {"local": 16}
            and results["tasks"]["local"]["train_examples"] == 32)


def bad_folder(root: Path, damage) -> Path:
    """A copy of a good folder with one file damaged."""
    write_tsv(root / "train.tsv", reviews(10, seed=0))
    write_tsv(root / "dev.tsv", reviews(5, seed=1))
    damage(root)
    return root


def latin1_csv(root: Path) -> None:
    """train.tsv replaced by a train.csv saved as Latin-1, not UTF-8."""
    (root / "train.tsv").unlink()
    (root / "train.csv").write_bytes("id,review,sentiment\nr0,un film tr\xe8s bon,positive\n".encode("latin-1"))


CASES = [  # (extra arguments, or a damage to the folder; what the one line says)
    (lambda root: write_tsv(root / "dev.tsv", reviews(5, 1), header=("id", "text", "sentiment")),
     "dev.tsv, line 1: the header lacks the column(s) review"),
    (lambda root: write_tsv(root / "train.tsv", [*reviews(4, 0), ("r9", "a fine film", "neutral")]),
     "train.tsv, line 6: label 'neutral' is not negative or positive (1 malformed of 5 rows"),
    (lambda root: (root / "dev.tsv").write_text(""), "dev.tsv: no examples (an empty file)"),
    (lambda root: (root / "train.tsv").write_text("id\treview\tsentiment\n"), "train.tsv: no examples (only a header)"),
    (lambda root: write_tsv(root / "train.csv", []), "holds both train.tsv and train.csv; it needs one of them"),
    (latin1_csv, "{folder}/train.csv, line 2: not valid UTF-8 (invalid continuation byte at byte 33)"),
    (lambda root: (root / "dev.tsv").unlink(), "holds neither of dev.tsv and dev.csv; it needs one of them"),
    (["eval.local.labels=null"], "eval.local.labels is null: list the label strings in the order of their ids"),
    (["eval.local.labels=null", "eval.local.metric=f1"], "eval.local.metric=f1 scores classes but eval.local.labels="
                                                         "None makes the label a number"),
    (["eval.local.metric=recall"], "eval.local.metric=recall is not one of accuracy, f1, matthews, pearson"),
    (["eval.local.labels=[negative,positive,mixed]", "eval.local.metric=f1"],
     "eval.local.metric=f1 scores the second of two labels; eval.local.labels has 3"),
    (["eval.local.metric=pearson"], "eval.local.metric=pearson scores a number but eval.local.labels=['negative', "
                                    "'positive'] makes the label a class"),
    (["eval.local.labels=[positive,positive]"], "must list two or more different label strings"),
    (["eval.local.text_columns=[review,sentiment]"], "eval.local.label_column='sentiment' must name a column that "
                                                     "holds no text"),
    (["eval.local.folder=/nowhere/at/all"], "eval.local.folder=/nowhere/at/all: no such folder"),
    (["eval.local.folder=null"], "eval.tasks has local but eval.local.folder is null"),
    (["eval.tasks=[rte]"], "eval.local.folder={folder} is set but eval.tasks has no local, so nothing would read it"),
]


@pytest.mark.parametrize(("change", "message"), CASES, ids=[message[:40] for _, message in CASES])
def test_a_bad_file_or_setting_is_one_line(checkpoint, tmp_path, change, message):
    folder = bad_folder(tmp_path / "data", change if callable(change) else lambda root: None)
    arguments = [] if callable(change) else change
    tasks = [] if any(argument.startswith("eval.tasks=") for argument in arguments) else ["eval.tasks=[local]"]
    run = in_process("eval_glue", f"ckpt={checkpoint}", *tasks, *SETTINGS, f"eval.local.folder={folder}", *arguments,
                     f"output_dir={tmp_path / 'out'}")
    last = run.stderr.strip().splitlines()[-1]
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert last.startswith("error: ") and message.format(folder=folder) in last, last
