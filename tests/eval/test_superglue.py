"""SuperGLUE and RACE: each task's official metric on predictions checked by hand, the readers of the
official layouts and of the hub (faked at `datasets.load_dataset`), bad input as one line and exit 2, and
`eval_glue.py` running every task from the command line, its scores checked against its own submission files."""

import json
import math
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from cramming.errors import CrammingError
from cramming.eval.batching import chosen_rows, subset
from cramming.eval.encoders import open_encoder
from cramming.eval.run import glue_dev_scores
from cramming.eval.tasks.base import take
from cramming.eval.tasks.registry import TASK_NAMES, task_named
from cramming.eval.tasks.superglue import SCORE_METRICS
from tests.commands import in_process

from .conftest import make_checkpoint
from .superglue_files import all_texts, write_jsonl, write_race, write_superglue
from .test_swag import swag_rows, write_csv

REPO = Path(__file__).resolve().parents[2]
SUPERGLUE = ["boolq", "cb", "copa", "multirc", "record", "rte", "wic", "wsc", "axb", "axg"]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    return make_checkpoint(tmp_path_factory.mktemp("superglue") / "checkpoint", all_texts(), vocab_size=120)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("superglue-data")
    return write_race(write_superglue(root))


def scored(task: str, folder: Path, outputs: list, tokenizer) -> dict:
    """The task's scores of hand-made outputs on the validation split it reads from `folder`."""
    data = task_named(task)().load(str(folder), 0.0)
    split = task_named(task)().encode(next(iter(data.evaluations.values())), tokenizer, 128)
    return task_named(task)().score(np.array(outputs, dtype=np.float64), split.labels.numpy(), split.scoring)


def test_each_official_metric_on_predictions_checked_by_hand(checkpoint, tmp_path):
    tokenizer = open_encoder(str(checkpoint), 0.1).tokenizer
    cb = [{"premise": "a", "hypothesis": "b", "label": label, "idx": i}
          for i, label in enumerate(["entailment", "contradiction", "neutral", "entailment"])]
    for split in ("train", "val"):
        write_jsonl(tmp_path / "CB" / f"{split}.jsonl", cb)
    # predicted e, c, c, n: F1 of e 2/3 (P 1, R 1/2), of c 2/3 (P 1/2, R 1), of n 0; 2 of 4 right
    assert scored("cb", tmp_path, np.eye(3)[[0, 1, 1, 2]], tokenizer) == pytest.approx(
        {"macro_f1": 100 * 4 / 9, "accuracy": 50.0})

    answers = [[1, 0], [1, 1, 0]]  # two questions' answers, right (1) or wrong (0)
    multirc = {"idx": 0, "passage": {"text": "Anna ran.", "questions": [
        {"question": "who?", "idx": q, "answers": [{"text": "Anna", "idx": a, "label": label}
                                                   for a, label in enumerate(labels)]}
        for q, labels in enumerate(answers)]}}
    for split in ("train", "val"):
        write_jsonl(tmp_path / "MultiRC" / f"{split}.jsonl", [multirc])
    # judged right, wrong | right, wrong, wrong: TP 2, FN 1, FP 0 -> F1a 4/5; question 0 all right, 1 not
    assert scored("multirc", tmp_path, [[2.0], [-1.0], [0.5], [-0.5], [-3.0]], tokenizer) == pytest.approx(
        {"f1a": 80.0, "exact_match": 50.0})

    text = "Anna met Ben Smith. Ben left."
    spans = [(0, 3), (9, 17), (20, 22)]  # Anna, Ben Smith, Ben (end offsets included, as released)
    record = {"idx": 0, "passage": {"text": text, "entities": [{"start": s, "end": e} for s, e in spans]},
              "qas": [{"query": "@placeholder waved.", "idx": 7, "answers": [{"start": 20, "end": 22, "text": "Ben"}]},
                      {"query": "@placeholder smiled.", "idx": 8,
                       "answers": [{"start": 9, "end": 17, "text": "Ben Smith"}]}]}
    for split in ("train", "val"):
        write_jsonl(tmp_path / "ReCoRD" / f"{split}.jsonl", [record])
    # rows: query 7 x (Anna, Ben Smith, Ben), query 8 x the same; best: Ben (exact), Ben (F1 of ben / ben smith 2/3)
    assert scored("record", tmp_path, [[0.0], [1.0], [2.0], [0.0], [1.0], [3.0]], tokenizer) == pytest.approx(
        {"f1": 100 * (1 + 2 / 3) / 2, "exact_match": 50.0})

    axg = [{"premise": f"He {i}", "hypothesis": f"pair {i // 2}", "idx": i,
            "label": ["entailment", "not_entailment"][i // 2]} for i in range(4)]
    write_jsonl(tmp_path / "AX-g" / "AX-g.jsonl", axg)
    write_jsonl(tmp_path / "RTE" / "train.jsonl", [{"premise": "a", "hypothesis": "b", "idx": 0,
                                                    "label": "entailment"}])
    # pair 0 predicted alike (both right), pair 1 not (one right): parity 1/2, accuracy 3/4
    assert scored("axg", tmp_path, np.eye(2)[[0, 0, 0, 1]], tokenizer) == pytest.approx(
        {"gender_parity": 50.0, "accuracy": 75.0})

    for split, levels in (("train", ("middle",)), ("dev", ("middle", "high"))):
        for level in levels:
            (tmp_path / "RACE" / split / level).mkdir(parents=True)
            (tmp_path / "RACE" / split / level / "1.txt").write_text(json.dumps(
                {"article": "Anna ran.", "questions": ["who?", "why?"], "options": [["a", "b", "c", "d"]] * 2,
                 "answers": ["A", "D"], "id": "1.txt"}))
    # middle's two questions (A, D) are read first, then high's (A, D); predicted A, D | A, A
    assert scored("race", tmp_path, np.eye(4)[[0, 3, 0, 0]], tokenizer) == pytest.approx(
        {"accuracy": 75.0, "accuracy_middle": 100.0, "accuracy_high": 50.0})


def test_a_capped_train_split_is_taken_before_encoding_and_encodes_as_the_cap_of_the_whole(checkpoint, data_dir,
                                                                                          tmp_path):
    """eval.max_train_examples takes its examples before the tokenizer runs (eval/run.py), so a smoke run on a
    large task tokenizes what it trains on. For every split type the taken examples encode to the very rows the
    same cap picks from the whole split's encoding: one encoded row an example (MultiRC and ReCoRD are read as
    one example an answer candidate)."""
    write_csv(tmp_path / "SWAG" / "train.csv", swag_rows(12))
    write_csv(tmp_path / "SWAG" / "val.csv", swag_rows(4, seed=1))
    tokenizer = open_encoder(str(checkpoint), 0.1).tokenizer
    folders = {name: data_dir for name in SUPERGLUE if not name.startswith("ax")} | {"race": data_dir, "swag": tmp_path}
    split_types = set()
    for name, folder in folders.items():
        task = task_named(name)()
        examples = task.load(str(folder), 0.0).train
        whole = task.encode(examples, tokenizer, 128)
        assert len(whole) == len(examples) > 4, name
        cap = len(examples) // 2
        taken = task.encode(take(examples, chosen_rows(len(examples), cap)), tokenizer, 128)
        capped = subset(whole, cap)
        assert taken.input_ids == capped.input_ids and torch.equal(taken.labels, capped.labels), name
        assert (taken.token_type_ids, taken.scoring) == (capped.token_type_ids, capped.scoring), name
        assert len(take(examples, chosen_rows(len(examples), 10 ** 6))) == len(examples)  # a cap above: all of it
        split_types.add(type(examples).__name__)
    assert split_types == {"TextSplit", "Examples", "ChoiceSplit", "RaceSplit"}


def test_the_superglue_score_averages_each_tasks_metrics():
    from cramming.eval.tasks.superglue import superglue_score

    scores = {"boolq": {"accuracy": 60.0}, "cb": {"macro_f1": 40.0, "accuracy": 80.0},
              "multirc": {"f1a": 50.0, "exact_match": 10.0}, "axb": {"matthews": 5.0}, "rte": {"accuracy": 70.0}}
    assert superglue_score(scores) == (pytest.approx((60 + 60 + 30 + 70) / 4), ["boolq", "cb", "multirc", "rte"])
    assert superglue_score({"rte": {"accuracy": 70.0}}) == (None, [])  # GLUE's RTE alone is no SuperGLUE run


def test_wsc_is_read_in_its_fixed_form(tmp_path):
    row = {"text": "Mark told Pete many lies about himself.", "idx": 0, "label": False,
           "target": {"span1_index": 0, "span1_text": "mark.", "span2_index": 5, "span2_text": "himself"}}
    for split in ("train", "val"):
        write_jsonl(tmp_path / "WSC" / f"{split}.jsonl", [row])
    data = task_named("wsc")().load(str(tmp_path), 0.0)
    assert data.train.rows[0].texts == ("Mark told Pete many lies about himself.", "0", "5", "Mark", "himself")


def hub_columns(task: str, records: list[dict], labelled: bool = True) -> dict:
    """The columns the hub's aps/super_glue gives a task's official records (its loading script's mapping)."""
    if task == "multirc":
        rows = [{"paragraph": r["passage"]["text"], "question": q["question"], "answer": a["text"],
                 "idx": {"paragraph": r["idx"], "question": q["idx"], "answer": a["idx"]}, "label": a.get("label", -1)}
                for r in records for q in r["passage"]["questions"] for a in q["answers"]]
    elif task == "record":
        rows = [{"passage": r["passage"]["text"], "query": qa["query"],
                 "entities": [r["passage"]["text"][e["start"]: e["end"] + 1] for e in r["passage"]["entities"]],
                 "answers": sorted({a["text"] for a in qa.get("answers", [])}), "idx": {"passage": r["idx"],
                                                                                      "query": qa["idx"]}}
                for r in records for qa in r["qas"]]
    else:
        labels = getattr(task_named(task), "labels", None) if task in TASK_NAMES else None
        rows = []
        for r in records:
            row = {**r, **r.get("target", {})}
            if "label" in r and labels is not None and task != "copa":
                row["label"] = labels.index(r["label"])
            rows.append(row)
    return {key: [row.get(key, -1) for row in rows] for key in rows[0]}


def test_the_hub_reader_gives_what_the_files_give(data_dir, monkeypatch):
    """Each task from a faked `datasets.load_dataset` with the hub's columns reads as from the official files."""
    import datasets

    folders = {"boolq": "BoolQ", "cb": "CB", "copa": "COPA", "multirc": "MultiRC", "record": "ReCoRD",
               "rte": "RTE", "wic": "WiC", "wsc.fixed": "WSC"}
    asked = []

    def load_dataset(path, config, split):
        asked.append((path, config, split))
        if path == "ehovy/race":
            files = sorted((data_dir / "RACE" / {"train": "train", "validation": "dev"}[split] / config).glob("*"))
            records = [json.loads(file.read_text()) for file in files]
            return datasets.Dataset.from_list([
                {"example_id": r["id"], "article": r["article"], "question": q, "options": o, "answer": a}
                for r in records for q, o, a in zip(r["questions"], r["options"], r["answers"])])
        task = {"wsc.fixed": "wsc"}.get(config, config)
        file = (data_dir / f"AX-{config[-1]}" / f"AX-{config[-1]}.jsonl" if config in ("axb", "axg") else
                data_dir / folders[config] / f"{ {'validation': 'val'}.get(split, split)}.jsonl")
        records = [json.loads(line) for line in file.read_text().splitlines()]
        return datasets.Dataset.from_dict(hub_columns(task if task != "rte" else "axb", records))

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    for name in ["boolq", "cb", "copa", "multirc", "record", "wic", "wsc", "axb", "axg"]:
        from_hub, from_files = task_named(name)().load(None, 0.0), task_named(name)().load(str(data_dir), 0.0)
        for hub, files in [(from_hub.train, from_files.train),
                           *zip(from_hub.evaluations.values(), from_files.evaluations.values())]:
            assert [(r.texts, r.label, r.idx) for r in hub.rows] == [(r.texts, r.label, r.idx) for r in files.rows]
    assert ("aps/super_glue", "wsc.fixed", "validation") in asked and ("aps/super_glue", "axb", "test") in asked
    assert ("aps/super_glue", "rte", "train") in asked  # AX-b's and AX-g's RTE model trains on RTE
    hub, files = task_named("race")().load(None, 0.0), task_named("race")().load(str(data_dir), 0.0)
    for a, b in [(hub.train, files.train), (hub.evaluations["race"], files.evaluations["race"])]:
        assert (a.questions, a.options, a.labels, a.levels) == (b.questions, b.options, b.labels, b.levels)
    assert ("ehovy/race", "middle", "train") in asked and ("ehovy/race", "high", "validation") in asked

    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: datasets.Dataset.from_dict(
        {"question": ["q"], "passage": ["p"], "idx": [0], "label": [2]}))
    with pytest.raises(CrammingError, match=r"aps/super_glue/boolq:train, row 0: label 2 is out of range \(0-1\)"):
        task_named("boolq")().load(None, 0.0)


@pytest.mark.parametrize(("folder", "file", "line", "edit", "message"), [
    ("BoolQ", "train.jsonl", 3, lambda r: '{"question": "q", "passage"', "line 3: not valid JSON"),
    ("CB", "val.jsonl", 2, lambda r: json.dumps({**r, "label": "maybe"}),
     'line 2: label "maybe" is not "entailment" or "contradiction" or "neutral"'),
    ("COPA", "train.jsonl", 4, lambda r: json.dumps({**r, "label": 2}), "line 4: label 2 is not 0 or 1"),
    ("WiC", "train.jsonl", 1, lambda r: json.dumps({k: v for k, v in r.items() if k != "word"}),
     "line 1: no field 'word'"),
])
def test_bad_input_is_one_line_naming_file_line_and_value(checkpoint, data_dir, tmp_path, folder, file, line, edit,
                                                          message):
    import shutil

    root = tmp_path / "data"
    shutil.copytree(data_dir, root)
    path = root / folder / file
    lines = path.read_text().splitlines()
    lines[line - 1] = edit(json.loads(lines[line - 1]))
    path.write_text("\n".join(lines) + "\n")
    task = {"BoolQ": "boolq", "CB": "cb", "COPA": "copa", "WiC": "wic"}[folder]
    run = in_process("eval_glue", f"ckpt={checkpoint}", f"eval.tasks=[{task}]", f"eval.data_dir={root}",
                     f"output_dir={tmp_path / 'out'}")
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert run.stderr.strip().splitlines()[-1].startswith(f"error: {path}, {message}")


def test_a_bad_race_answer_and_a_missing_file_end_in_one_line(checkpoint, data_dir, tmp_path):
    import shutil

    root = tmp_path / "data"
    shutil.copytree(data_dir, root)
    path = root / "RACE" / "dev" / "high" / "1.txt"
    record = json.loads(path.read_text())
    path.write_text(json.dumps({**record, "answers": ["E", *record["answers"][1:]]}))
    run = in_process("eval_glue", f"ckpt={checkpoint}", "eval=race", f"eval.data_dir={root}",
                     f"output_dir={tmp_path / 'out'}")
    assert run.returncode == 2
    assert run.stderr.strip().splitlines()[-1].startswith(
        f'error: {path}, line 1, question 1: answer "E" is not one of A-D (1 malformed of 8 rows')
    (root / "MultiRC" / "train.jsonl").unlink()
    run = in_process("eval_glue", f"ckpt={checkpoint}", "eval.tasks=[multirc]", f"eval.data_dir={root}",
                     f"output_dir={tmp_path / 'out2'}")
    assert run.returncode == 2
    assert run.stderr.strip().splitlines()[-1] == (
        f"error: no data for any requested task (multirc: {root / 'MultiRC' / 'train.jsonl'} not found)")


def _eval_glue(*overrides: str) -> subprocess.CompletedProcess:
    env = os.environ | {"PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
                        "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, str(REPO / "eval_glue.py"), *overrides], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)


def _jsonl(zipped: zipfile.ZipFile, name: str) -> list[dict]:
    return [json.loads(line) for line in zipped.read(name).decode().splitlines()]


@pytest.mark.slow
def test_eval_glue_runs_superglue_and_race_and_its_scores_are_those_of_its_predictions(checkpoint, data_dir, tmp_path):
    """One run of every task: the test files are the validation files without labels, so the leaderboard
    files written must score (by this test's own arithmetic) what the run reports for validation."""
    out = tmp_path / "out"
    run = _eval_glue(f"ckpt={checkpoint}", "eval=superglue", f"eval.tasks=[{','.join(SUPERGLUE)},race]",
                     f"eval.data_dir={data_dir}", "eval.epochs=1", "eval.predict_test=true", "eval.save_models=true",
                     f"output_dir={out}")
    assert run.returncode == 0, run.stderr
    results = json.loads((out / "glue_results.json").read_text())
    scores = results["scores"]
    assert {name: results["tasks"][name]["status"] for name in [*SUPERGLUE, "race"]} == dict.fromkeys(
        [*SUPERGLUE, "race"], "ran")
    assert results["glue_score_over"] == ["rte"]  # only RTE is GLUE's
    task_scores = [sum(scores[name][m] for m in metrics) / len(metrics) for name, metrics in SCORE_METRICS.items()]
    assert results["superglue_score"] == pytest.approx(sum(task_scores) / 8)
    assert results["superglue_score_over"] == list(SCORE_METRICS)

    def labels(folder, field="label"):
        return [json.loads(line)[field] for line in (data_dir / folder / "val.jsonl").read_text().splitlines()]

    with zipfile.ZipFile(results["superglue_submission"]) as zipped:
        assert sorted(zipped.namelist()) == sorted(f"{n}.jsonl" for n in
                                                   ["AX-b", "AX-g", "BoolQ", "CB", "COPA", "MultiRC", "ReCoRD", "RTE",
                                                    "WiC", "WSC"])
        boolq = _jsonl(zipped, "BoolQ.jsonl")
        assert {row["label"] for row in boolq} <= {"true", "false"}
        right = [row["label"] == str(gold).lower() for row, gold in zip(boolq, labels("BoolQ"))]
        assert scores["boolq"]["accuracy"] == pytest.approx(100 * sum(right) / len(right))
        wsc = _jsonl(zipped, "WSC.jsonl")
        assert scores["wsc"]["accuracy"] == pytest.approx(
            100 * np.mean([row["label"] == str(gold) for row, gold in zip(wsc, labels("WSC"))]))
        copa = _jsonl(zipped, "COPA.jsonl")
        assert scores["copa"]["accuracy"] == pytest.approx(
            100 * np.mean([row["label"] == gold for row, gold in zip(copa, labels("COPA"))]))
        cb = [row["label"] for row in _jsonl(zipped, "CB.jsonl")]
        gold = labels("CB")
        f1 = []
        for label in ("entailment", "contradiction", "neutral"):
            tp = sum(p == g == label for p, g in zip(cb, gold))
            fp, fn = sum(p == label != g for p, g in zip(cb, gold)), sum(g == label != p for p, g in zip(cb, gold))
            f1.append(0.0 if tp == 0 else 2 * tp / (2 * tp + fp + fn))
        assert scores["cb"]["macro_f1"] == pytest.approx(100 * sum(f1) / 3)
        multirc = {(p["idx"], q["idx"], a["idx"]): a["label"] for p in _jsonl(zipped, "MultiRC.jsonl")
                   for q in p["passage"]["questions"] for a in q["answers"]}
        gold = {(p["idx"], q["idx"], a["idx"]): a["label"] for p in map(json.loads, (
            data_dir / "MultiRC" / "val.jsonl").read_text().splitlines()) for q in p["passage"]["questions"]
                for a in q["answers"]}
        tp = sum(multirc[k] == gold[k] == 1 for k in gold)
        fp, fn = sum(multirc[k] == 1 != gold[k] for k in gold), sum(gold[k] == 1 != multirc[k] for k in gold)
        questions = {k[:2] for k in gold}
        exact = [all(multirc[k] == gold[k] for k in gold if k[:2] == q) for q in questions]
        assert scores["multirc"] == pytest.approx({"f1a": 100 * 2 * tp / (2 * tp + fp + fn),
                                                   "exact_match": 100 * sum(exact) / len(exact)})
        record = {row["idx"]: row["label"] for row in _jsonl(zipped, "ReCoRD.jsonl")}
        answers = {qa["idx"]: {a["text"] for a in qa["answers"]} for p in map(json.loads, (
            data_dir / "ReCoRD" / "val.jsonl").read_text().splitlines()) for qa in p["qas"]}
        exact = [record[q] in answers[q] for q in answers]  # one-word names: F1 is exact match here
        assert scores["record"] == pytest.approx({"f1": 100 * np.mean(exact), "exact_match": 100 * np.mean(exact)})
        axg = [row["label"] for row in _jsonl(zipped, "AX-g.jsonl")]
        assert scores["axg"]["gender_parity"] == pytest.approx(
            100 * np.mean([axg[i] == axg[i + 1] for i in range(0, len(axg), 2)]))
        assert {row["label"] for row in _jsonl(zipped, "AX-b.jsonl")} <= {"entailment", "not_entailment"}
        assert len(_jsonl(zipped, "RTE.jsonl")) == len(labels("RTE"))
    race = scores["race"]
    assert race["accuracy"] == pytest.approx((race["accuracy_middle"] + race["accuracy_high"]) / 2)  # 4 and 4
    assert math.isfinite(scores["axb"]["matthews"])
    report = (out / "glue_results.md").read_text()
    assert "## SuperGLUE" in report and "| RACE (accuracy, validation) |" in report
    assert f"| {results['superglue_score']:.1f} |" in report
    # the kept models: transformers' own Auto classes load them, and they score what the run reported
    for name in ("copa", "multirc", "record", "boolq"):
        kept = glue_dev_scores(out / "models" / f"{name}-seed0", name, str(data_dir))
        assert kept[name] == pytest.approx(scores[name], abs=1e-3), name
    assert json.loads((out / "models" / "copa-seed0" / "config.json").read_text())["architectures"] == [
        "CrammedBertForMultipleChoice"]
