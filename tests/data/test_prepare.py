import gzip
import json
import os

import numpy as np
import pytest
from transformers import PreTrainedTokenizerFast

from cramming.data import prepare as prepare_module
from cramming.data import store
from cramming.data.config import FilterConfig, TokenizerConfig
from cramming.data.mlm import MLMCollator, PackedRows
from cramming.data.prepare import prepare_dataset
from cramming.data.sources import DataConfig, embedded_documents
from cramming.data.tokenizer import load_tokenizer
from cramming.data.vocab import SEP_ID
from cramming.errors import CrammingError


def embedded(**overrides) -> DataConfig:
    settings = {"name": "embedded", "source": "embedded", "tokenizer": TokenizerConfig(vocab_size=2000)}
    settings.update(overrides)
    return DataConfig(**settings)


def test_prepare_store_and_reuse(cache_dir):
    dataset, reused = prepare_dataset(embedded(), str(cache_dir))
    assert not reused
    meta = dataset.meta
    assert meta["num_rows"] > 500 and meta["vocab_size"] == 2000 and meta["seq_length"] == 128
    docs = meta["documents"]
    assert docs["read"] + docs["pieces_from_cuts"] == docs["kept"] + sum(docs["dropped"].values())
    rows = dataset.rows()
    assert rows.dtype == np.uint16 and rows.shape == (meta["num_rows"], 128)
    assert (rows == SEP_ID).sum() >= docs["kept"] - 1
    assert sorted(dataset.order().tolist()) == list(range(meta["num_rows"]))
    assert store.file_sha256(dataset.path / store.ROWS_FILE) == meta["sha256"]["rows.bin"]
    tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(dataset.tokenizer_path))
    assert tokenizer.convert_tokens_to_ids(["[PAD]", "[MASK]"]) == [0, 4]

    again, reused = prepare_dataset(embedded(), str(cache_dir))
    assert reused and again.path == dataset.path and again.meta == meta

    batch = MLMCollator(2000, seed=0)([PackedRows(dataset)[i] for i in range(4)])
    assert batch["input_ids"].shape == (4, 128)


def test_cache_key_follows_what_changes_the_output(tmp_path):
    base = store.cache_key(embedded(), {"x": 1})
    assert store.cache_key(embedded(batch_mb=0.5), {"x": 1}) == base  # execution only
    assert store.cache_key(embedded(tokenizer=TokenizerConfig(vocab_size=3000)), {"x": 1}) != base
    assert store.cache_key(embedded(seq_length=64), {"x": 1}) != base
    assert store.cache_key(embedded(filter=FilterConfig(min_chars=10)), {"x": 1}) != base
    assert store.cache_key(embedded(), {"x": 2}) != base  # the source changed
    monkey_version = store.FORMAT_VERSION
    try:
        store.FORMAT_VERSION = monkey_version + 1
        assert store.cache_key(embedded(), {"x": 1}) != base
    finally:
        store.FORMAT_VERSION = monkey_version


def test_edited_local_file_is_not_served_from_cache(cache_dir, tmp_path):
    corpus = tmp_path / "corpus.txt"
    text = "\n\n".join("\n".join(document) for document in embedded_documents())
    corpus.write_text(text)
    cfg = DataConfig(name="local", source="local", files=str(corpus), tokenizer=TokenizerConfig(vocab_size=2000))
    first, _ = prepare_dataset(cfg, str(cache_dir))
    corpus.write_text(text + "\n\none more document about the import statement and modules\n")
    os.utime(corpus, ns=(1, 1))
    second, reused = prepare_dataset(cfg, str(cache_dir))
    assert not reused and second.path != first.path


def test_output_does_not_depend_on_batch_size(cache_dir, tmp_path, monkeypatch):
    reference, _ = prepare_dataset(embedded(), str(cache_dir))
    trained = load_tokenizer(reference.tokenizer_path)  # the same tokenizer for both (training has ties)
    monkeypatch.setattr(prepare_module, "train_tokenizer", lambda *args: trained)
    small, _ = prepare_dataset(embedded(batch_mb=0.01), str(tmp_path / "a"))
    large, _ = prepare_dataset(embedded(batch_mb=8), str(tmp_path / "b"))
    assert small.meta["sha256"] == large.meta["sha256"] == reference.meta["sha256"]


def test_interrupted_build_leaves_nothing_trusted(cache_dir, monkeypatch):
    def explode(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(prepare_module, "documents_to_stream", explode)
    with pytest.raises(KeyboardInterrupt):
        prepare_dataset(embedded(), str(cache_dir))
    assert list((cache_dir / "data").iterdir()) == []
    monkeypatch.undo()
    _, reused = prepare_dataset(embedded(), str(cache_dir))
    assert not reused


def test_stale_and_damaged_builds_are_rebuilt(cache_dir):
    dataset, _ = prepare_dataset(embedded(), str(cache_dir))
    stale = dataset.path.parent / f".{dataset.path.name}.tmp-999999999"
    stale.mkdir()
    with open(dataset.path / store.ROWS_FILE, "r+b") as handle:
        handle.truncate(100)  # a damaged dataset: rows do not match meta.json
    rebuilt, reused = prepare_dataset(embedded(), str(cache_dir))
    assert not reused and rebuilt.path == dataset.path
    assert store.PreparedDataset.open(rebuilt.path).num_rows == rebuilt.num_rows
    assert not stale.exists()


def test_corpus_smaller_than_one_row(cache_dir, tmp_path):
    (tmp_path / "tiny.txt").write_text("a short document of a few words that is still long enough\n")
    cfg = DataConfig(
        name="tiny",
        source="local",
        files=str(tmp_path / "tiny.txt"),
        tokenizer=TokenizerConfig(vocab_size=30),
        filter=FilterConfig(trash_cutoff=None),
    )
    with pytest.raises(CrammingError, match="fewer than one row of data.seq_length=128"):
        prepare_dataset(cfg, str(cache_dir))
    assert not any((cache_dir / "data").iterdir())


def test_every_document_filtered_out(cache_dir, tmp_path):
    (tmp_path / "empty.txt").write_text("")
    with gzip.open(tmp_path / "short.txt.gz", "wt") as handle:
        handle.write("tiny\n\nbits\n")
    cfg = DataConfig(name="x", source="local", files=str(tmp_path / "*"), tokenizer=TokenizerConfig(vocab_size=30))
    with pytest.raises(CrammingError):
        prepare_dataset(cfg, str(cache_dir))


def test_enormous_single_line_is_processed(cache_dir, tmp_path):
    words = " ".join(" ".join(document) for document in embedded_documents())
    line = (words * 7)[:3_000_000]
    (tmp_path / "one_line.txt").write_text(line)
    cfg = DataConfig(
        name="line", source="local", files=str(tmp_path / "one_line.txt"), tokenizer=TokenizerConfig(vocab_size=2000),
        max_doc_chars=1_000_000, filter=FilterConfig(trash_cutoff=None),
    )
    dataset, _ = prepare_dataset(cfg, str(cache_dir))
    documents = dataset.meta["documents"]
    assert documents["cut_for_length"] == 1 and documents["kept"] == 1 + documents["pieces_from_cuts"] >= 3
    assert dataset.num_rows > 3_000_000 / 6 / 128


def test_meta_json_records_counts_hashes_and_config(cache_dir):
    dataset, _ = prepare_dataset(embedded(ordering="frequency_curriculum"), str(cache_dir))
    meta = json.loads((dataset.path / store.META_FILE).read_text())
    assert meta["config"]["ordering"] == "frequency_curriculum"
    assert set(meta["sha256"]) == {"rows.bin", "order.npy", "token_counts.npy", "tokenizer.json"}
    assert meta["documents"]["dropped"].keys() == {"too_short", "bad_bytes", "duplicate", "near_duplicate", "trash",
                                                    "no_text"}
    assert meta["megabytes_per_second"] > 0


def test_open_errors(tmp_path):
    with pytest.raises(CrammingError, match="no prepared dataset"):
        store.PreparedDataset.open(tmp_path)
    (tmp_path / store.META_FILE).write_text("{")
    with pytest.raises(CrammingError, match="corrupt"):
        store.PreparedDataset.open(tmp_path)
