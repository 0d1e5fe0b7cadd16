"""The GLUE stage in-process on synthetic tasks in the classic TSV layout, and its bad-input errors."""

import dataclasses
import random
import shutil
import statistics
import zipfile
from pathlib import Path

import pytest
import torch

from cramming.errors import CrammingError
from cramming.eval.run import load_task_data, run_glue
from cramming.eval.tasks.registry import GlueConfig, requested_tasks

from .conftest import make_checkpoint

FILLERS = "the a movie film plot actor scene story was is very quite really and but it this that with".split()
POSITIVE, NEGATIVE = ["good", "great", "fine"], ["bad", "awful", "poor"]


def _sentence(rng: random.Random, marker: str) -> str:
    words = rng.choices(FILLERS, k=rng.randint(4, 10))
    words.insert(rng.randint(0, len(words)), marker)
    return " ".join(words)


def _write_synthetic_glue(root: Path, seed: int = 0) -> None:
    """SST-2: the label says whether the sentence holds a positive or a negative word (easy).
    STS-B: the second sentence is the first with k words replaced; the score is 5 - k."""
    rng = random.Random(seed)
    (root / "SST-2").mkdir(parents=True)
    for file, count in (("train.tsv", 480), ("dev.tsv", 200)):
        rows = ["sentence\tlabel"]
        for _ in range(count):
            label = rng.randint(0, 1)
            rows.append(f"{_sentence(rng, rng.choice(POSITIVE if label else NEGATIVE))}\t{label}")
        (root / "SST-2" / file).write_text("\n".join(rows) + "\n")
    (root / "STS-B").mkdir()
    header = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore"
    for file, count in (("train.tsv", 160), ("dev.tsv", 60)):
        rows = [header]
        for index in range(count):
            first = rng.choices(FILLERS, k=8)
            second = list(first)
            replaced = rng.randint(0, 5)
            for position in rng.sample(range(8), replaced):
                second[position] = rng.choice(POSITIVE + NEGATIVE)
            sentences = f"{' '.join(first)}\t{' '.join(second)}"
            rows.append(f"{index}\tgenre\tfile\tyear\t0\tnone\tnone\t{sentences}\t{5 - replaced:.3f}")
        (root / "STS-B" / file).write_text("\n".join(rows) + "\n")


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory) -> tuple[Path, Path]:
    """(GLUE-layout data dir, tiny checkpoint whose tokenizer knows the synthetic words)."""
    root = tmp_path_factory.mktemp("synthetic")
    _write_synthetic_glue(root / "glue")
    texts = [" ".join(FILLERS + POSITIVE + NEGATIVE)] * 20
    return root / "glue", make_checkpoint(root / "checkpoint", texts, vocab_size=100)  # whole words


def _cfg(data_dir: Path, **overrides) -> GlueConfig:
    return GlueConfig(data_dir=str(data_dir), **({"tasks": ["sst2"], "epochs": 1} | overrides))


def test_fine_tuning_beats_the_majority_class_and_writes_both_reports(synthetic, tmp_path):
    data_dir, checkpoint = synthetic
    # A never-pretrained tiny encoder needs a larger learning rate than the protocol's to learn in 90 steps.
    cfg = _cfg(data_dir, tasks=["sst2", "stsb", "qqp"], epochs=3, lr=3e-3, skip_missing=True)
    results = run_glue(cfg, checkpoint, tmp_path)

    dev_rows = (data_dir / "SST-2" / "dev.tsv").read_text().splitlines()[1:]
    dev_labels = [int(row.rsplit("\t", 1)[1]) for row in dev_rows]
    majority = 100 * max(dev_labels.count(0), dev_labels.count(1)) / len(dev_labels)
    assert results["scores"]["sst2"]["accuracy"] > majority + 20
    assert set(results["scores"]["stsb"]) == {"pearson", "spearman"}
    missing = {"status": "missing", "reason": f"{data_dir / 'QQP' / 'train.tsv'} not found"}
    assert results["tasks"]["qqp"] == missing
    assert results["glue_score_over"] == ["sst2", "stsb"]
    assert results["glue_score"] == pytest.approx(
        (results["scores"]["sst2"]["accuracy"] + results["scores"]["stsb"]["pearson"]) / 2
    )
    epochs = results["tasks"]["sst2"]["seeds"]["0"]
    assert [record["epoch"] for record in epochs] == [1, 2, 3]
    assert epochs[-1]["scores"]["sst2"] == results["scores"]["sst2"]  # the last epoch is what is reported
    assert results["protocol_deviations"] == {
        "lr": {"protocol": 4e-5, "used": 3e-3},
        "epochs": {"protocol": 5, "used": 3},
    }
    assert (tmp_path / "glue_results.json").is_file()
    assert "| **this checkpoint** | –/– |" in (tmp_path / "glue_results.md").read_text()


def test_seeds_report_the_median_and_the_spread(synthetic, tmp_path):
    data_dir, checkpoint = synthetic
    results = run_glue(_cfg(data_dir, seeds=[0, 1, 2], max_train_examples=32), checkpoint, tmp_path)
    seeds = results["tasks"]["sst2"]["seeds"]
    finals = sorted(seeds[seed][-1]["scores"]["sst2"]["accuracy"] for seed in ("0", "1", "2"))
    assert results["scores"]["sst2"]["accuracy"] == finals[1]
    spread = results["tasks"]["sst2"]["spread"]["sst2"]["accuracy"]
    assert (spread["min"], spread["max"]) == (finals[0], finals[2])
    assert spread["stdev"] == pytest.approx(statistics.stdev(finals))
    assert results["tasks"]["sst2"]["train_examples"] == 32
    report = (tmp_path / "glue_results.md").read_text()
    assert "median over 3 seed(s) [0, 1, 2]" in report
    assert f"over 3 seeds: accuracy {finals[0]:.1f}–{finals[2]:.1f} (sd {statistics.stdev(finals):.1f})" in report


def test_length_bucketing_is_off_by_default_and_a_deviation_when_on(synthetic, tmp_path):
    data_dir, checkpoint = synthetic
    assert GlueConfig().length_bucketing is False
    results = run_glue(_cfg(data_dir, length_bucketing=True, max_train_examples=32), checkpoint, tmp_path)
    assert results["protocol_deviations"]["length_bucketing"] == {"protocol": False, "used": True}
    assert "- `length_bucketing`: True (protocol: False)" in (tmp_path / "glue_results.md").read_text()


def test_a_baseline_row_and_saved_models(synthetic, tmp_path):
    data_dir, checkpoint = synthetic
    earlier = run_glue(_cfg(data_dir, max_train_examples=32, seeds=[1]), checkpoint, tmp_path / "earlier")
    results = run_glue(_cfg(data_dir, max_train_examples=32, save_models=True,
                            baseline=str(tmp_path / "earlier" / "glue_results.json")), checkpoint, tmp_path / "now")
    assert results["baseline"]["scores"] == earlier["scores"]
    row = f"| baseline: `{checkpoint}` | –/– | {earlier['scores']['sst2']['accuracy']:.1f} |"
    assert row in (tmp_path / "now" / "glue_results.md").read_text()

    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    saved = tmp_path / "now" / "models" / "sst2-seed0"
    model = AutoModelForSequenceClassification.from_pretrained(saved, trust_remote_code=True).eval()
    tokenizer = AutoTokenizer.from_pretrained(saved, trust_remote_code=True)
    dev = [row.split("\t") for row in (data_dir / "SST-2" / "dev.tsv").read_text().splitlines()[1:]]
    with torch.no_grad():
        logits = model(**tokenizer([text for text, _ in dev], padding=True, return_tensors="pt")).logits
    accuracy = 100 * (logits.argmax(-1) == torch.tensor([int(label) for _, label in dev])).float().mean().item()
    assert accuracy == pytest.approx(results["scores"]["sst2"]["accuracy"], abs=1e-3)  # the model that scored


def test_a_bad_baseline_is_one_line(synthetic, tmp_path):
    data_dir, checkpoint = synthetic
    (tmp_path / "other.json").write_text("{}")
    with pytest.raises(CrammingError, match="eval.baseline=.*other.json: not a glue_results.json"):
        run_glue(_cfg(data_dir, baseline=str(tmp_path / "other.json")), checkpoint, tmp_path)
    with pytest.raises(CrammingError, match="eval.baseline=/nowhere.json: cannot read it"):
        run_glue(_cfg(data_dir, baseline="/nowhere.json"), checkpoint, tmp_path)


def test_unknown_task_is_an_error(synthetic, tmp_path):
    data_dir, checkpoint = synthetic
    with pytest.raises(CrammingError, match="unknown GLUE task 'sst-2'"):
        run_glue(_cfg(data_dir, tasks=["sst-2"]), checkpoint, tmp_path)


def test_malformed_row_stops_the_run_naming_file_and_line(synthetic, tmp_path):
    data_dir, checkpoint = synthetic
    broken = tmp_path / "glue"
    shutil.copytree(data_dir, broken)
    with open(broken / "SST-2" / "dev.tsv", "a") as file:
        file.write("a sentence without a label\n")
    expected = r"SST-2/dev.tsv, line 202: expected 2 tab-separated fields, found 1"
    with pytest.raises(CrammingError, match=expected):
        run_glue(_cfg(broken), checkpoint, tmp_path)


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda ckpt: (ckpt / "model.safetensors").unlink(), "model.safetensors is missing"),
        (lambda ckpt: (ckpt / "model.safetensors").write_bytes(b"not safetensors"), "corrupt or unreadable"),
        (lambda ckpt: (ckpt / "tokenizer.json").unlink(), "the checkpoint has no tokenizer"),
    ],
)
def test_bad_checkpoints_are_one_line_errors(synthetic, tmp_path, damage, message):
    data_dir, checkpoint = synthetic
    damaged = shutil.copytree(checkpoint, tmp_path / "damaged")
    damage(damaged)
    with pytest.raises(CrammingError, match=message) as error:
        run_glue(_cfg(data_dir), damaged, tmp_path / "out")
    assert "\n" not in str(error.value)


def test_test_predictions_become_a_submission_zip(synthetic, tmp_path):
    """Test splits in the classic layout (an id column, no labels): here the dev texts, so the predicted
    labels must score exactly what the dev set scored."""
    data_dir, checkpoint = synthetic
    glue = shutil.copytree(data_dir, tmp_path / "glue")
    dev = [row.split("\t") for row in (glue / "SST-2" / "dev.tsv").read_text().splitlines()[1:]]
    (glue / "SST-2" / "test.tsv").write_text("index\tsentence\n"
                                             + "".join(f"{i}\t{text}\n" for i, (text, _) in enumerate(dev)))
    cfg = _cfg(glue, tasks=["sst2", "stsb"], max_train_examples=32, predict_test=True, skip_missing=True)
    results = run_glue(cfg, checkpoint, tmp_path / "out")
    assert results["tasks"]["stsb"]["test_predictions"]["stsb"].startswith("missing: ")
    with zipfile.ZipFile(results["submission"]) as zipped:
        assert zipped.namelist() == ["SST-2.tsv"]
        lines = zipped.read("SST-2.tsv").decode().splitlines()
    assert lines[0] == "index\tprediction" and len(lines) == len(dev) + 1
    predicted = [line.split("\t") for line in lines[1:]]
    assert [index for index, _ in predicted] == [str(i) for i in range(len(dev))]
    accuracy = 100 * sum(label == gold for (_, label), (_, gold) in zip(predicted, dev)) / len(dev)
    assert accuracy == pytest.approx(results["scores"]["sst2"]["accuracy"])


def test_what_has_no_data_is_refused_before_fine_tuning_unless_eval_skip_missing_allows_it(synthetic):
    """A requested task, an evaluation split and a test split the submission reads, each without its file."""
    data_dir, _ = synthetic
    cfg = _cfg(data_dir, tasks=["sst2", "qqp"], predict_test=True)
    with pytest.raises(CrammingError) as refused:
        load_task_data(requested_tasks(cfg), cfg)
    assert str(refused.value) == (f"no data for qqp: {data_dir}/QQP/train.tsv not found; the submission's SST-2.tsv: "
                                  f"{data_dir}/SST-2/test.tsv not found — the run would leave them out: add the files, "
                                  "or set eval.skip_missing=true to run the rest without them")
    allowed = dataclasses.replace(cfg, skip_missing=True)
    data, missing, skipped = load_task_data(requested_tasks(allowed), allowed)
    assert list(data) == ["sst2"] and list(missing) == ["qqp"]
    assert skipped == {"qqp": f"{data_dir}/QQP/train.tsv not found",
                       "the submission's SST-2.tsv": f"{data_dir}/SST-2/test.tsv not found"}


def test_server_label_strings():
    from cramming.eval.tasks.registry import task_named

    outputs = torch.tensor([[0.1, 0.9, 0.0], [2.0, 0.0, 1.0]])
    assert task_named("mnli")().label_strings(outputs) == ["neutral", "entailment"]
    assert task_named("rte")().label_strings(outputs[:, :2]) == ["not_entailment", "entailment"]
    assert task_named("stsb")().label_strings(torch.tensor([[-0.5], [2.25], [7.0]])) == ["0.000", "2.250", "5.000"]
