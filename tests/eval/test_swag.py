"""SWAG (multiple choice beyond GLUE): the CSV reader on files the tests write, the batching and model shapes,
and `eval_glue.py eval.tasks=[swag]` as a user runs it (a real subprocess on a tiny checkpoint)."""

import csv
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import (AutoModelForMultipleChoice, AutoTokenizer, BertConfig, BertForMaskedLM, BertTokenizerFast,
                          RobertaConfig, RobertaForMaskedLM)

from cramming.errors import CrammingError
from cramming.eval.batching import collate, evaluation_batches
from cramming.eval.encoders import open_encoder
from cramming.eval.run import glue_dev_scores, run_glue
from cramming.eval.tasks.base import DataMissing
from cramming.eval.tasks.registry import task_named
from cramming.eval.tasks.swag import load_hub_split, read_csv_split
from cramming.model.export import export_to_transformers

from .conftest import make_checkpoint

REPO = Path(__file__).resolve().parents[2]

HEADER = ["", "video-id", "fold-ind", "startphrase", "sent1", "sent2", "gold-source",
          "ending0", "ending1", "ending2", "ending3", "label"]  # the official files' columns
PEOPLE = ["someone", "the man", "a woman", "the girl", "he", "she"]
ACTIONS = ["opens the door", "picks up a cup", "runs down the road", "sits on the bench",
           "waves at the camera", "throws the ball", "climbs the ladder", "reads a book"]


def _eval_glue(*overrides: str, timeout: int = 300) -> subprocess.CompletedProcess:
    """With one torch thread: the tiny model runs in a fraction of a second, not fighting for shared cores."""
    env = os.environ | {"PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
                        "OMP_NUM_THREADS": "1"}
    command = [sys.executable, str(REPO / "eval_glue.py"), *overrides]
    return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)


def swag_rows(count: int, seed: int = 0) -> list[list[str]]:
    """Rows in the official layout: a context, the start of an ending, four endings, the right one's index."""
    rng = random.Random(seed)
    rows = []
    for index in range(count):
        person, action = rng.choice(PEOPLE), rng.choice(ACTIONS)
        endings = rng.sample(ACTIONS, 4)
        label = rng.randrange(4)
        rows.append([str(index), f"video{index}", str(index), f"{person} {action}. {person}",
                     f"{person} {action}, \"then\" slowly.", person, "gold", *endings, str(label)])
    return rows


def write_csv(path: Path, rows: list[list[str]], header: list[str] = HEADER) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as file:
        csv.writer(file).writerows([header, *rows])
    return path


@pytest.fixture(scope="module")
def swag_dir(tmp_path_factory) -> Path:
    """<dir>/SWAG/{train,val}.csv: 48 and 24 rows."""
    root = tmp_path_factory.mktemp("swag-data")
    write_csv(root / "SWAG" / "train.csv", swag_rows(48, seed=0))
    write_csv(root / "SWAG" / "val.csv", swag_rows(24, seed=1))
    return root


@pytest.fixture(scope="module")
def swag_checkpoint(tmp_path_factory) -> Path:
    texts = [" ".join(row[4:6] + row[7:11]) for row in swag_rows(200)]
    return make_checkpoint(tmp_path_factory.mktemp("swag") / "checkpoint", texts, vocab_size=120)


def test_reader_reads_the_official_columns_quoted_fields_included(tmp_path):
    rows = swag_rows(3)
    rows[1][5] = 'she says "hi, there"\nand'  # a quoted field with a comma, quotes and a line break
    split = read_csv_split(write_csv(tmp_path / "train.csv", rows), max_malformed_fraction=0.0)
    assert len(split) == 3 and split.labels == [int(row[-1]) for row in rows]
    assert split.contexts[0] == rows[0][4] and split.starts[1] == 'she says "hi, there"\nand'
    assert split.endings[2] == tuple(rows[2][7:11]) and split.skipped_rows == []


@pytest.mark.parametrize(
    ("bad_row", "message"),
    [
        (lambda row: row[:-1] + ["4"], "line 3: label '4' is not one of 0-3"),
        (lambda row: row[:-1] + ["x"], "line 3: label 'x' is not one of 0-3"),
        (lambda row: row[:6], "line 3: expected 12 comma-separated fields, found 6"),
    ],
)
def test_a_malformed_row_is_an_error_naming_file_line_and_value(tmp_path, bad_row, message):
    rows = swag_rows(3)
    rows[1] = bad_row(rows[1])
    path = write_csv(tmp_path / "val.csv", rows)
    with pytest.raises(CrammingError) as error:
        read_csv_split(path, max_malformed_fraction=0.001)
    assert str(error.value).startswith(f"{path}, {message} (1 malformed of 3 rows, at most 0 tolerated")


def test_few_malformed_rows_are_skipped_and_counted(tmp_path):
    rows = swag_rows(20)
    rows[4][-1] = "7"
    split = read_csv_split(write_csv(tmp_path / "train.csv", rows), max_malformed_fraction=0.1)
    assert len(split) == 19 and split.skipped_rows == [6]


def test_header_without_the_columns_and_missing_files(tmp_path):
    path = write_csv(tmp_path / "SWAG" / "train.csv", swag_rows(2), header=HEADER[:-1] + ["gold"])
    with pytest.raises(CrammingError, match=r"train.csv, line 1: the header lacks the column\(s\) label"):
        read_csv_split(path, 0.001)
    with pytest.raises(DataMissing, match="val.csv not found"):
        write_csv(path, swag_rows(2))
        task_named("swag")().load(str(tmp_path), 0.001)


def test_each_example_is_four_pairs_scored_from_cls(swag_dir, swag_checkpoint):
    encoder = open_encoder(str(swag_checkpoint), dropout=0.1)
    data = task_named("swag")().load(str(swag_dir), 0.001)
    split = task_named("swag")().encode(data.evaluations["swag"], encoder.tokenizer, max_length=16)
    assert len(split) == 24 and split.choices == 4
    tokenizer, first = encoder.tokenizer, data.evaluations["swag"]
    ending = f"{first.starts[0]} {first.endings[0][2]}"
    pair = tokenizer(first.contexts[0], ending, truncation=True, max_length=16)
    assert split.input_ids[0][2] == pair["input_ids"]  # [CLS] sent1 [SEP] sent2 ending [SEP], as a GLUE pair
    batch = collate(split, evaluation_batches(split, 5)[0], tokenizer.pad_token_id)
    assert batch["input_ids"].shape[:2] == (5, 4) and batch["labels"].shape == (5,)
    model = task_named("swag")().model(encoder, 0.1, seed=0).eval()
    output = model(**batch)
    assert output.logits.shape == (5, 4) and output.loss.ndim == 0
    alone = model.scorer(input_ids=batch["input_ids"][1], attention_mask=batch["attention_mask"][1]).logits
    torch.testing.assert_close(output.logits[1], alone.view(4))  # one [CLS] score per choice, padding ignored


@pytest.mark.slow
def test_eval_glue_runs_swag_from_the_command_line(swag_dir, swag_checkpoint, tmp_path):
    run = _eval_glue(f"ckpt={swag_checkpoint}", "eval.tasks=[swag]", f"eval.data_dir={swag_dir}",
                     "eval.epochs=1", f"output_dir={tmp_path}")
    assert run.returncode == 0, run.stderr
    console = run.stdout + run.stderr
    assert "swag: 48 train examples, evaluation on swag (24)" in console
    assert "swag seed 0 epoch 1/1: train loss" in console and "SWAG accuracy" in console
    results = json.loads((tmp_path / "glue_results.json").read_text())
    assert 0.0 <= results["scores"]["swag"]["accuracy"] <= 100.0
    assert results["glue_score"] is None and results["glue_score_over"] == []  # never in the GLUE average
    assert results["tasks"]["swag"]["eval_examples"] == {"swag": 24}
    assert set(results["protocol_deviations"]) == {"epochs"}
    report = (tmp_path / "glue_results.md").read_text()
    assert "## Beyond GLUE" in report and "| model | SWAG (accuracy, validation) |" in report
    assert f"| **this checkpoint** | {results['scores']['swag']['accuracy']:.1f} |" in report


def test_a_bad_swag_label_ends_in_one_line(swag_checkpoint, tmp_path):
    rows = swag_rows(10)
    rows[3][-1] = "5"
    write_csv(tmp_path / "data" / "SWAG" / "train.csv", rows)
    write_csv(tmp_path / "data" / "SWAG" / "val.csv", swag_rows(4))
    run = _eval_glue(f"ckpt={swag_checkpoint}", "eval.tasks=[swag]", f"eval.data_dir={tmp_path / 'data'}",
                     f"output_dir={tmp_path / 'out'}", timeout=120)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    train = tmp_path / "data" / "SWAG" / "train.csv"
    assert run.stderr.strip().splitlines()[-1].startswith(
        f"error: {train}, line 5: label '5' is not one of 0-3 (1 malformed of 10 rows")


def accuracy_of_kept_model(folder: Path, split) -> float:
    """A kept SWAG model scored as a user would: AutoModelForMultipleChoice on its tokenizer's padded pairs."""
    model = AutoModelForMultipleChoice.from_pretrained(folder, trust_remote_code=True).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
    first = [context for context in split.contexts for _ in range(4)]
    second = [f"{start} {ending}".strip() for start, endings in zip(split.starts, split.endings) for ending in endings]
    inputs = tokenizer(first, second, padding=True, truncation=True, max_length=128, return_tensors="pt")
    with torch.no_grad():
        logits = model(**{key: value.view(len(split), 4, -1) for key, value in inputs.items()}).logits  # (N, 4)
    assert type(model).__name__ == "CrammedBertForMultipleChoice"
    return 100 * (logits.argmax(-1) == torch.tensor(split.labels)).float().mean().item()


def test_our_export_scores_swag_as_our_checkpoint_does_and_both_keep_a_multiple_choice_model(
        swag_dir, swag_checkpoint, tmp_path):
    """The same head and pooler on both paths: ckpt=hf:<export> gives our checkpoint's losses and accuracy; each
    keeps (eval.save_models) the model that scored, as AutoModelForMultipleChoice loads it."""
    export_to_transformers(swag_checkpoint, tmp_path / "export")
    settings = {"tasks": ["swag"], "data_dir": str(swag_dir), "epochs": 1, "max_train_examples": 16,
                "save_models": True}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny model: one thread is faster than two fought over
    try:
        direct = run_glue(settings, swag_checkpoint, tmp_path / "direct")
        exported = run_glue(settings, f"hf:{tmp_path / 'export'}", tmp_path / "exported")
    finally:
        torch.set_num_threads(threads)
    assert exported["scores"] == direct["scores"]
    losses = [[epoch["train_loss"] for epoch in run["tasks"]["swag"]["seeds"]["0"]]
              for run in (direct, exported)]
    assert losses[0] == losses[1]
    assert direct["beyond_glue"] == {"swag": "accuracy"}
    validation = read_csv_split(swag_dir / "SWAG" / "val.csv", 0.0)
    for run in ("direct", "exported"):
        kept = accuracy_of_kept_model(tmp_path / run / "models" / "swag-seed0", validation)
        assert kept == pytest.approx(direct["scores"]["swag"]["accuracy"], abs=1e-3), run
    # what quantize_eval_task=swag scores (scripts/export.py): the kept model through the task's own encoding
    kept_scores = glue_dev_scores(tmp_path / "direct" / "models" / "swag-seed0", "swag", str(swag_dir))
    assert kept_scores["swag"]["accuracy"] == pytest.approx(direct["scores"]["swag"]["accuracy"], abs=1e-3)
    with pytest.raises(CrammingError, match=r"^quantize_eval_task=swag: no data to score it on \(.*not found\)$"):
        glue_dev_scores(tmp_path / "direct" / "models" / "swag-seed0", "swag", str(tmp_path / "nowhere"))


def bert_like_folder(folder: Path, config_class, model_class) -> Path:
    """A tiny masked LM of a transformers architecture, saved with a WordPiece tokenizer of SWAG's words."""
    words = sorted({word.strip('.,"') for row in swag_rows(200) for text in row[4:11]
                    for word in text.split()})
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n")
    BertTokenizerFast(vocab_file=str(folder / "vocab.txt")).save_pretrained(folder)
    torch.manual_seed(0)
    config = config_class(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                          intermediate_size=64, pad_token_id=0)
    model_class(config).save_pretrained(folder)
    return folder


def test_a_transformers_bert_reads_four_pairs_with_segment_ids_and_keeps_its_multiple_choice_model(
        swag_dir, tmp_path):
    encoder = open_encoder(f"hf:{bert_like_folder(tmp_path / 'bert', BertConfig, BertForMaskedLM)}", dropout=0.1)
    train = task_named("swag")().load(str(swag_dir), 0.001).train
    split = task_named("swag")().encode(train, encoder.tokenizer, max_length=128)
    batch = collate(split, [0, 1, 2], encoder.tokenizer.pad_token_id)
    assert batch["token_type_ids"].shape == batch["input_ids"].shape == (3, 4, batch["input_ids"].shape[-1])
    assert batch["token_type_ids"].max() == 1  # sent2 + ending is segment 1
    model = task_named("swag")().model(encoder, 0.1, seed=0)
    output = model(**batch)
    assert output.logits.shape == (3, 4) and torch.isfinite(output.loss)

    task_named("swag")().save(model, encoder, tmp_path / "kept")
    kept = AutoModelForMultipleChoice.from_pretrained(tmp_path / "kept").eval()
    assert type(kept).__name__ == "BertForMultipleChoice"
    with torch.no_grad():
        torch.testing.assert_close(kept(**batch).logits, model.eval()(**batch).logits)


def test_an_architecture_whose_multiple_choice_head_differs_keeps_the_scorer_and_says_so(swag_dir, tmp_path, caplog):
    """RoBERTa's multiple-choice model reads its pooler, its sequence classifier a head of its own: SWAG's
    scorer cannot become the one, so it is kept as the other, with a warning."""
    encoder = open_encoder(f"hf:{bert_like_folder(tmp_path / 'roberta', RobertaConfig, RobertaForMaskedLM)}", 0.1)
    model = task_named("swag")().model(encoder, 0.1, seed=0)
    task_named("swag")().save(model, encoder, tmp_path / "kept")
    assert json.loads((tmp_path / "kept" / "config.json").read_text())["architectures"] == [
        "RobertaForSequenceClassification"]
    assert "the multiple-choice model of its architecture does not hold the scorer SWAG trained" in caplog.text


def test_the_hub_reader_maps_the_hub_columns(monkeypatch):
    """load_hub_split on a datasets.Dataset with the hub's columns (the hub itself is out of reach in tests)."""
    import datasets

    rows = swag_rows(5)
    columns = {name: [row[HEADER.index(name)] for row in rows] for name in HEADER[1:-1]}
    labelled = datasets.Dataset.from_dict(columns | {"label": [int(row[-1]) for row in rows]})
    asked = []
    monkeypatch.setattr(datasets, "load_dataset", lambda *args, **kwargs: asked.append((args, kwargs)) or labelled)
    split = load_hub_split("validation")
    assert asked == [(("allenai/swag", "regular"), {"split": "validation"})]
    assert split.source == "allenai/swag/regular:validation" and split.labels == labelled["label"]
    assert split.contexts == columns["sent1"] and split.endings[3] == tuple(rows[3][7:11])
    unlabelled = datasets.Dataset.from_dict(columns | {"label": [-1] * 5})  # as the hub's test split
    monkeypatch.setattr(datasets, "load_dataset", lambda *args, **kwargs: unlabelled)
    with pytest.raises(CrammingError, match="allenai/swag/regular:test: label -1 is not one of 0-3"):
        load_hub_split("test")
