"""GLUE readers: official row counts on the real TSV files, label mapping, malformed and missing files."""

from pathlib import Path

import pytest

from cramming.eval.tasks.base import DataMissing
from cramming.eval.tasks.registry import task_named
from cramming.errors import CrammingError

from .conftest import GLUE_DIR

needs_glue = pytest.mark.skipif(not GLUE_DIR.is_dir(), reason=f"GLUE TSV files not found at {GLUE_DIR}")

OFFICIAL_ROWS = {  # (task, file): rows
    ("cola", "train.tsv"): 8551,
    ("cola", "dev.tsv"): 1043,
    ("sst2", "train.tsv"): 67349,
    ("sst2", "dev.tsv"): 872,
    ("mrpc", "train.tsv"): 3668,
    ("mrpc", "dev.tsv"): 408,
    ("stsb", "train.tsv"): 5749,
    ("stsb", "dev.tsv"): 1500,
    ("qnli", "dev.tsv"): 5463,
    ("rte", "train.tsv"): 2490,
    ("rte", "dev.tsv"): 277,
    ("wnli", "train.tsv"): 635,
    ("wnli", "dev.tsv"): 71,
    ("mnli", "dev_matched.tsv"): 9815,
}


@needs_glue
@pytest.mark.parametrize(("task_name", "file"), list(OFFICIAL_ROWS))
def test_local_reader_gives_official_row_counts(task_name, file):
    task = task_named(task_name)()
    split = task.read_file(GLUE_DIR / task.folder / file, max_malformed_fraction=0.0)
    assert len(split) == OFFICIAL_ROWS[(task_name, file)]
    assert len(split.text_a) == len(split)
    assert split.skipped_rows == []
    if split.text_b is not None:
        assert len(split.text_b) == len(split)


@needs_glue
def test_local_reader_maps_labels_like_the_hub():
    rte = task_named("rte")().read_file(GLUE_DIR / "RTE" / "dev.tsv", 0.0)
    assert sorted(set(rte.labels)) == [0, 1] and rte.labels.count(0) == 146  # 146 entailment = hub id 0
    mnli = task_named("mnli")().read_file(GLUE_DIR / "MNLI" / "dev_matched.tsv", 0.0)
    entailment, neutral, contradiction = (mnli.labels.count(i) for i in range(3))
    assert (entailment, neutral, contradiction) == (3479, 3123, 3213)
    mrpc = task_named("mrpc")().read_file(GLUE_DIR / "MRPC" / "dev.tsv", 0.0)  # header starts with a BOM
    assert mrpc.labels.count(1) == 279
    cola = task_named("cola")().read_file(GLUE_DIR / "CoLA" / "dev.tsv", 0.0)  # no header row
    assert cola.text_a[0] == "The sailors rode the breeze clear of the rocks." and cola.text_b is None
    stsb = task_named("stsb")().read_file(GLUE_DIR / "STS-B" / "dev.tsv", 0.0)
    assert stsb.labels[0] == 5.0 and all(0.0 <= score <= 5.0 for score in stsb.labels)


def test_quotes_are_plain_characters(tmp_path):
    (tmp_path / "RTE").mkdir()
    rows = [
        "index\tsentence1\tsentence2\tlabel",
        '0\t"He said\tno "quotes\tentailment',
        '1\ta\tb"\tnot_entailment',
    ]
    (tmp_path / "RTE" / "dev.tsv").write_text("\n".join(rows) + "\n")
    split = task_named("rte")().read_file(tmp_path / "RTE" / "dev.tsv", 0.0)
    assert split.text_a == ['"He said', "a"] and split.text_b == ['no "quotes', 'b"']
    assert split.labels == [0, 1]


def _write_rte(folder: Path, train_rows: list[str]) -> None:
    (folder / "RTE").mkdir(parents=True)
    header = "index\tsentence1\tsentence2\tlabel\n"
    (folder / "RTE" / "train.tsv").write_text(header + "".join(row + "\n" for row in train_rows))
    (folder / "RTE" / "dev.tsv").write_text(header + "0\ta\tb\tentailment\n")


def test_malformed_row_is_a_one_line_error_naming_file_and_line(tmp_path):
    _write_rte(tmp_path, ["0\ta\tb\tentailment", "1\tonly two fields", "2\ta\tb\tentailment"])
    with pytest.raises(CrammingError) as error:
        task_named("rte")().load(str(tmp_path), max_malformed_fraction=0.001)
    message = str(error.value)
    assert "\n" not in message
    assert f"{tmp_path / 'RTE' / 'train.tsv'}, line 3: expected 4 tab-separated fields, found 2" in message


def test_a_test_file_that_is_not_utf8_is_one_line_naming_its_line_and_byte(tmp_path):
    """A test split (read for eval.predict_test) saved as Latin-1 after a UTF-8 BOM: the offset counts the file's
    bytes, the BOM's included."""
    path = tmp_path / "SST-2" / "test.tsv"
    path.parent.mkdir()
    path.write_bytes(b"\xef\xbb\xbf" + "index\tsentence\n0\tfine\n1\tcaf\xe9\n".encode("latin-1"))
    with pytest.raises(CrammingError) as error:
        task_named("sst2")().load_test(task_named("sst2")().eval_splits[0], str(tmp_path))
    assert str(error.value) == f"{path}, line 3: not valid UTF-8 (invalid continuation byte at byte 30)"


def test_unknown_label_is_malformed(tmp_path):
    _write_rte(tmp_path, ["0\ta\tb\tmaybe"])
    with pytest.raises(CrammingError, match="line 2: label 'maybe' is not entailment or not_entailment"):
        task_named("rte")().load(str(tmp_path), max_malformed_fraction=0.0)


def test_few_malformed_rows_in_a_large_file_are_counted_not_dropped_silently(tmp_path):
    rows = [f"{i}\tpremise {i}\thypothesis {i}\tentailment" for i in range(2000)]
    rows[500] = "500\tbroken row"
    _write_rte(tmp_path, rows)
    data = task_named("rte")().load(str(tmp_path), max_malformed_fraction=0.001)  # 2 of 2000 tolerated
    assert len(data.train) == 1999
    assert data.train.skipped_rows == [502]  # line 1 is the header


def test_missing_files_are_reported_as_missing(tmp_path):
    with pytest.raises(DataMissing, match="RTE/train.tsv not found"):
        task_named("rte")().load(str(tmp_path), 0.001)


@needs_glue
def test_mnli_without_train_is_missing_and_keeps_the_reason():
    with pytest.raises(DataMissing, match="MNLI/train.tsv not found"):
        task_named("mnli")().load(str(GLUE_DIR), 0.001)


def test_unknown_task_name():
    with pytest.raises(CrammingError, match="unknown GLUE task 'mnli-m'; known tasks: cola, sst2"):
        task_named("mnli-m")


def test_hub_splits_map_the_hub_columns(monkeypatch):
    import datasets

    calls = []

    def fake_load_dataset(path, name, split):
        calls.append((path, name, split))
        return datasets.Dataset.from_dict({"premise": ["p"], "hypothesis": ["h"], "label": [2], "idx": [0]})

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    data = task_named("mnli")().load(None, 0.001)
    splits = ("train", "validation_matched", "validation_mismatched")
    assert calls == [("nyu-mll/glue", "mnli", split) for split in splits]
    assert list(data.evaluations) == ["mnli-m", "mnli-mm"]
    assert (data.train.text_a, data.train.text_b, data.train.labels) == (["p"], ["h"], [2])


@pytest.mark.parametrize(("task", "label", "message"), [
    ("rte", 7, "nyu-mll/glue/rte:train, row 1: label 7 is out of range for rte"),
    ("stsb", 5.5, "nyu-mll/glue/stsb:train, row 1: label 5.5 is out of range for stsb"),
])
def test_hub_labels_out_of_range_are_an_error(monkeypatch, task, label, message):
    import datasets

    def fake_load_dataset(path, name, split):
        return datasets.Dataset.from_dict({"sentence1": ["a", "b"], "sentence2": ["c", "d"], "label": [0, label]})

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    with pytest.raises(CrammingError, match=message):
        task_named(task)().load(None, 0.001)


def test_unreachable_hub_means_missing(monkeypatch):
    import datasets

    def offline(path, name, split):
        raise ConnectionError("Couldn't reach 'nyu-mll/glue' on the Hub (OfflineModeIsEnabled)\nmore detail")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    # only the first line of the error, so the report stays one line per task, with why the hub is out of reach
    expected = r"^nyu-mll/glue/rte split train: ConnectionError: Couldn't reach .*Enabled\); the hub is out of reach: "
    with pytest.raises(DataMissing, match=expected):
        task_named("rte")().load(None, 0.001)
