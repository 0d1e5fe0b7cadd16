"""Data mixtures (data=mixture, data.sources): the interleaving holds the weights by characters at every
prefix, stops at the first exhausted source, is the same in two processes, and keys the dataset."""

import gzip
import json
import os
import shlex
import subprocess
import sys

import pytest
from omegaconf import OmegaConf

from cramming.data import store
from cramming.data.config import FilterConfig, TokenizerConfig
from cramming.data.mixture import Mixture, MixtureSourceConfig
from cramming.data.prepare import prepare_dataset
from cramming.data.sources import DataConfig, source_from_config
from tests.conftest import REPO_ROOT
from tests.train.runs import compose_config

# The key of this single-source config, pinned: data.sources leaves single-source datasets' keys unchanged.
EMBEDDED_KEY_BEFORE_MIXTURES = "07acb9b5bc0e9e6f"


@pytest.fixture(scope="module")
def corpora(gutenberg_valid, tmp_path_factory):
    """Two real corpora: Gutenberg paragraphs as text lines, and other Gutenberg paragraphs as jsonl records
    under another column."""
    root = tmp_path_factory.mktemp("mixture")
    with gzip.open(gutenberg_valid, "rt", encoding="utf-8") as handle:
        lines = [line for line in (handle.readline() for _ in range(6000)) if line.strip()]
    (root / "books.txt").write_text("".join(lines[:3000]))
    with open(root / "notes.jsonl", "w") as out:
        for line in lines[3000:]:
            out.write(json.dumps({"body": line.strip()}) + "\n")
    return root


def mixture(corpora, weights=(0.7, 0.3), **overrides) -> DataConfig:
    sources = [MixtureSourceConfig(files=str(corpora / "books.txt"), weight=weights[0], sample_by="line"),
               MixtureSourceConfig(files=str(corpora / "notes.jsonl"), weight=weights[1], name="notes",
                                   text_column="body")]
    settings = {"name": "mix", "source": "mixture", "sources": sources, "validation_rows": 0,
                "tokenizer": TokenizerConfig(vocab_size=1000), **overrides}
    return DataConfig(**settings)


def characters(document) -> int:
    return len("\n".join(document))


@pytest.mark.parametrize("weights", [(0.7, 0.3), (1, 3)])
def test_every_prefix_holds_the_weights_by_characters(corpora, weights):
    source = source_from_config(mixture(corpora, weights))
    assert isinstance(source, Mixture) and source.weights == pytest.approx([w / sum(weights) for w in weights])
    taken, longest, steps = [0, 0], 0, 0
    for origin, document in source.tagged_documents():
        taken[origin] += characters(document)
        longest = max(longest, characters(document))
        steps += 1
        for i in (0, 1):  # each source within one document of its share
            assert abs(taken[i] - source.weights[i] * sum(taken)) <= longest
    assert steps > 1000
    assert taken[1] / sum(taken) == pytest.approx(source.weights[1], abs=0.01)


def test_stops_when_the_source_due_runs_out(corpora):
    """notes.jsonl holds about as many characters as books.txt: at 0.9/0.1 the books run out first, and the
    stream stops there, with 10% notes, instead of going on with notes alone."""
    source = source_from_config(mixture(corpora, (0.9, 0.1)))
    books = sum(characters(document) for document in source.components[0].documents())
    taken = [0, 0]
    for origin, document in source.tagged_documents():
        taken[origin] += characters(document)
    assert taken[0] == books
    assert taken[1] / sum(taken) == pytest.approx(0.1, abs=0.005)


def test_preparation_records_each_source(corpora, tmp_path):
    # the trash filter relative to the median: a fixed 0.3 would drop most short paragraphs at this vocabulary
    cfg = mixture(corpora, filter=FilterConfig(trash_cutoff=1.3, trash_cutoff_scaling="median"))
    dataset, _ = prepare_dataset(cfg, tmp_path / "cache")
    meta = dataset.meta
    books, notes = meta["sources"]
    assert (books["name"], notes["name"]) == (str(corpora / "books.txt"), "notes")
    assert books["documents_read"] + notes["documents_read"] == meta["documents"]["read"]
    assert books["documents_kept"] + notes["documents_kept"] == meta["documents"]["kept"]
    stream_tokens = books["tokens"] + notes["tokens"]
    assert stream_tokens == meta["tokens_packed"] + meta["tail_tokens_dropped"]
    assert notes["token_share"] == pytest.approx(0.3, abs=0.01)  # characters read 0.3; similar text
    assert 0 < meta["documents"]["dropped"]["trash"] < 0.05 * meta["documents"]["read"]


def test_weights_are_part_of_the_cache_key_and_single_sources_keep_theirs(corpora):
    key = store.cache_key(mixture(corpora), {"x": 1})
    assert store.cache_key(mixture(corpora, (0.7, 0.3)), {"x": 1}) == key
    assert store.cache_key(mixture(corpora, (0.6, 0.4)), {"x": 1}) != key
    assert store.cache_key(mixture(corpora, (7, 3)), {"x": 1}) != key  # the weights as given: say 0.7, 0.3
    embedded = DataConfig(name="embedded", source="embedded", tokenizer=TokenizerConfig(vocab_size=2000))
    assert store.cache_key(embedded, {"x": 1}) == EMBEDDED_KEY_BEFORE_MIXTURES


def test_documented_command_line_gives_the_same_dataset_in_another_process(corpora, tmp_path):
    """The override exactly as docs/data.md writes it, through a shell; then the same settings in this process."""
    sources = (f'[{{files: "{corpora}/books.*", weight: 0.7, sample_by: line}}, '
               f'{{files: {corpora}/notes.jsonl, weight: 0.3, text_column: body, name: notes}}]')
    settings = ["data=mixture", "data.tokenizer.vocab_size=1000", "data.ordering=length_curriculum"]
    command = (f"{shlex.quote(sys.executable)} scripts/prepare_data.py {' '.join(settings)} "
               f"data.sources='{sources}' cache_dir={tmp_path}")
    run = subprocess.run(command, shell=True, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
                         env=os.environ.copy())
    assert run.returncode == 0, run.stderr
    assert "source    notes: weight 0.300, documents read" in run.stdout
    (meta,) = (tmp_path / "data").glob("mixture-*/meta.json")
    there = json.loads(meta.read_text())
    assert there["config"]["sources"][0]["files"] == f"{corpora}/books.*"
    here, reused = prepare_dataset(OmegaConf.to_object(compose_config([*settings, f"data.sources={sources}"]).data),
                                   tmp_path / "here")
    assert not reused and here.meta["sha256"] == there["sha256"] and here.meta["sources"] == there["sources"]
