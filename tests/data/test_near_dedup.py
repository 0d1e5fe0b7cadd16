"""Near-duplicate removal (data.filter.near_dedup_threshold): planted near-copies of real Gutenberg text are
dropped, and nothing else is; the signatures estimate Jaccard similarity; the count reaches the dataset's
record."""

import gzip
import json
import random

import numpy as np
import pytest
from datasketch import LeanMinHash
from omegaconf import OmegaConf

from cramming.data.config import FilterConfig
from cramming.data.filters import DocumentFilter
from cramming.data.near_dedup import signature, word_hashes
from cramming.data.prepare import prepare_dataset
from tests.train.runs import compose_config

PINNED_HASH_OF_TO = 0xA2422ED3E7FE6775  # word_hashes("to")[0]: a change of the hash changes what is dropped


@pytest.fixture(scope="module")
def passages(gutenberg_valid) -> list[list[str]]:
    """150 consecutive 300-word passages of real text from the validation shard."""
    with gzip.open(gutenberg_valid, "rt", encoding="utf-8") as handle:
        words = handle.read(4_000_000).split()
    return [words[start:start + 300] for start in range(0, 150 * 300, 300)]


def near_copy(words: list[str], changed: int, rng: random.Random) -> list[str]:
    """The passage with this many of its words replaced by (altered) words of its own."""
    copy = list(words)
    for index in rng.sample(range(len(copy)), changed):
        copy[index] = rng.choice(words) + "x"
    return copy


def shingles(words: list[str]) -> set[tuple[str, ...]]:
    return {tuple(words[i:i + 5]) for i in range(len(words) - 4)}


def test_signatures_estimate_jaccard_similarity(passages):
    rng = random.Random(0)
    for changed in (3, 15, 60):  # of 300 words
        a, b = passages[0], near_copy(passages[0], changed, rng)
        true = len(shingles(a) & shingles(b)) / len(shingles(a) | shingles(b))
        sketches = [LeanMinHash(seed=0, hashvalues=signature(" ".join(words)), scheme="affine64") for words in (a, b)]
        assert sketches[0].jaccard(sketches[1]) == pytest.approx(true, abs=0.12)
    unrelated = [LeanMinHash(seed=0, hashvalues=signature(" ".join(words)), scheme="affine64")
                 for words in passages[1:3]]
    assert unrelated[0].jaccard(unrelated[1]) < 0.05


def test_word_hashes_are_stable_and_split_on_whitespace():
    assert np.array_equal(word_hashes("to be  or\nnot to be"), word_hashes("to be or not\tto be"))
    hashes = word_hashes("to be or not to be")
    assert len(hashes) == 6 and hashes[0] == hashes[4] and hashes[1] == hashes[5] and len(set(hashes)) == 4
    assert hashes[0] == PINNED_HASH_OF_TO  # the same in every process and on every machine


def planted_corpus(passages, rng: random.Random) -> tuple[list[list[str]], set[int]]:
    """The passages as documents, with 12 near-copies (one or two words of 300 changed: Jaccard similarity
    0.93-0.97, which LSH tuned to 0.8 catches with probability 0.99-0.9999) and 6 half-overlapping documents
    (similarity about 1/3) inserted after their originals; the indices of the near-copies."""
    documents = [(" ".join(words), False) for words in passages]  # (text, is a planted near-copy)
    for number, source in enumerate(rng.sample(range(len(passages)), 18)):
        if number < 12:
            planted = (" ".join(near_copy(passages[source], rng.choice([1, 2]), rng)), True)
        else:  # the first half of one passage, the second of another: related, not a near-duplicate
            planted = (" ".join(passages[source][:150] + passages[(source + 1) % len(passages)][150:]), False)
        original = documents.index((" ".join(passages[source]), False))
        documents.insert(rng.randrange(original + 1, len(documents) + 1), planted)
    return [[text] for text, _ in documents], {index for index, (_, copy) in enumerate(documents) if copy}


def test_exactly_the_planted_near_duplicates_are_dropped(passages):
    documents, planted = planted_corpus(passages, random.Random(1))
    keep = DocumentFilter(FilterConfig(near_dedup_threshold=0.8), max_doc_chars=1_000_000)
    dropped = {index for index, document in enumerate(documents) if keep(document) == []}
    assert dropped == planted and keep.counts["dropped_near_duplicate"] == 12


def test_preparation_counts_near_duplicates_and_keys_the_dataset_by_the_threshold(passages, tmp_path):
    documents, _ = planted_corpus(passages, random.Random(2))
    corpus = tmp_path / "planted.jsonl"
    corpus.write_text("".join(json.dumps({"text": text}) + "\n" for (text,) in documents))
    data = compose_config(["data=local", f"data.files={corpus}", "data.tokenizer.vocab_size=500",
                           "data.validation_rows=0", "data.filter.trash_cutoff=null"]).data
    plain, _ = prepare_dataset(OmegaConf.to_object(data), tmp_path / "cache")
    data.filter.near_dedup_threshold = 0.8
    deduplicated, _ = prepare_dataset(OmegaConf.to_object(data), tmp_path / "cache")
    assert deduplicated.path != plain.path  # a dataset of its own
    assert plain.meta["documents"]["dropped"]["near_duplicate"] == 0
    assert deduplicated.meta["documents"]["dropped"]["near_duplicate"] == 12
    assert deduplicated.meta["documents"]["kept"] == plain.meta["documents"]["kept"] - 12
