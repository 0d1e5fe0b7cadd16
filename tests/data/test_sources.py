import gzip
import json

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cramming.data.source_base import Source
from cramming.data.sources import DataConfig, embedded_documents, resolve_files, source_from_config, text_size_bytes
from cramming.errors import CrammingError

BOOKS = "first line of book one\nsecond line of book one\n\nbook two starts here\nand ends here\n"


def local(files, **overrides) -> Source:
    return source_from_config(DataConfig(name="t", source="local", files=files, **overrides))


def test_text_gzip_and_paragraph_grouping(tmp_path):
    (tmp_path / "a.txt").write_text(BOOKS)
    with gzip.open(tmp_path / "b.txt.gz", "wt") as handle:
        handle.write(BOOKS)
    documents = list(local(str(tmp_path / "*.txt*")).documents())
    expected = [["first line of book one", "second line of book one"], ["book two starts here", "and ends here"]]
    assert documents == expected * 2
    assert text_size_bytes(str(tmp_path / "b.txt.gz")) == len(BOOKS)


def test_one_document_per_line(tmp_path):
    (tmp_path / "a.txt").write_text(BOOKS)
    documents = list(local(str(tmp_path / "a.txt"), sample_by="line").documents())
    assert len(documents) == 4 and documents[2] == ["book two starts here"]


def test_jsonl_and_parquet_through_datasets_builders(tmp_path):
    records = [{"text": "alpha beta\ngamma", "id": 1}, {"text": "delta", "id": 2}]
    (tmp_path / "c.jsonl").write_text("\n".join(json.dumps(record) for record in records))
    pq.write_table(pa.table({"body": ["parquet text"]}), tmp_path / "d.parquet")
    assert list(local(str(tmp_path / "c.jsonl")).documents()) == [["alpha beta", "gamma"], ["delta"]]
    assert list(local(str(tmp_path / "d.parquet"), text_column="body").documents()) == [["parquet text"]]
    with pytest.raises(CrammingError, match="no column 'text' .*columns: body"):
        list(local(str(tmp_path / "d.parquet")).documents())


def test_undecodable_bytes_are_replaced_not_fatal(tmp_path):
    (tmp_path / "bin.txt").write_bytes(b"\xff\xfe\x00\x00binary\x00junk\nplain words\n")
    documents = list(local(str(tmp_path / "bin.txt"), sample_by="line").documents())
    assert documents[0][0].count("\ufffd") == 2 and documents[1] == ["plain words"]


def test_empty_files_hold_no_documents(tmp_path):
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "full.txt").write_text(BOOKS)
    assert len(list(local(str(tmp_path / "*.txt")).documents())) == 2


def test_file_resolution_errors(tmp_path):
    (tmp_path / "notes.md").write_text("x")
    with pytest.raises(CrammingError, match="matches no files"):
        resolve_files(str(tmp_path / "*.txt"))
    with pytest.raises(CrammingError, match="no such file"):
        resolve_files(str(tmp_path / "missing.txt"))
    with pytest.raises(CrammingError, match="is a directory"):
        resolve_files(str(tmp_path))
    with pytest.raises(CrammingError, match="unsupported type"):
        resolve_files(str(tmp_path / "notes.md"))
    with pytest.raises(CrammingError, match="data.files is empty"):
        resolve_files([])


def test_corrupt_gzip_names_the_file(tmp_path):
    (tmp_path / "bad.txt.gz").write_bytes(b"\x1f\x8b\x08\x00 this is not really gzip")
    with pytest.raises(CrammingError, match="cannot read .*bad.txt.gz"):
        list(local(str(tmp_path / "bad.txt.gz")).documents())


def test_bad_source_settings():
    with pytest.raises(CrammingError, match="data.source='s3' is unknown"):
        source_from_config(DataConfig(name="t", source="s3"))
    with pytest.raises(CrammingError, match="needs data.hub_path"):
        source_from_config(DataConfig(name="t", source="hub"))
    with pytest.raises(CrammingError, match="sample_by='page' is unknown"):
        source_from_config(DataConfig(name="t", source="embedded", sample_by="page"))


def test_hub_source_offline_is_a_one_line_error():
    source = source_from_config(DataConfig(name="t", source="hub", hub_path="wikimedia/wikipedia", hub_name="x"))
    with pytest.raises(CrammingError, match="cannot load hub dataset wikimedia/wikipedia/x"):
        next(source.documents())


def test_hub_source_streams_records(monkeypatch, tmp_path):
    """The hub cannot be reached here: stand a local streaming dataset in for it."""
    (tmp_path / "rows.jsonl").write_text("\n".join(json.dumps({"content": f"doc {i}\nline"}) for i in range(5)))
    calls = []
    real_load_dataset = datasets.load_dataset

    def fake_load_dataset(path, name, split, streaming):
        calls.append((path, name, split, streaming))
        return real_load_dataset("json", data_files=str(tmp_path / "rows.jsonl"), split="train", streaming=True)

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    cfg = DataConfig(name="t", source="hub", hub_path="org/corpus", hub_name="en", text_column="content")
    documents = list(source_from_config(cfg).documents())
    assert calls == [("org/corpus", "en", "train", True)]
    assert documents[3] == ["doc 3", "line"] and len(documents) == 5


def test_embedded_corpus_is_english_prose_and_fingerprinted():
    documents = embedded_documents()
    assert len(documents) > 50 and sum(len(line) for doc in documents for line in doc) > 300_000
    fingerprint = source_from_config(DataConfig(name="e", source="embedded")).fingerprint()
    assert len(fingerprint["embedded_sha256"]) == 64
