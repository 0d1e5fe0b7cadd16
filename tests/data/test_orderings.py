"""The curricula of data.ordering: what each puts first, on planted rows and on real Gutenberg text."""

import gzip
import re

import numpy as np
import pytest
from omegaconf import OmegaConf

from cramming.data import ordering as ordering_module
from cramming.data.config import ORDERINGS, NormalizeConfig, TokenizerConfig
from cramming.data.ordering import row_order, sentence_end_ids
from cramming.data.prepare import prepare_dataset
from cramming.data.tokenizer import load_tokenizer, train_tokenizer
from cramming.data.vocab import SEP_ID
from tests.train.runs import compose_config

DOT, BANG, WORD, RARE = 10, 11, 20, 21


def write_rows(path, rows) -> None:
    np.asarray(rows, dtype=np.uint16).tofile(path)


def test_length_curriculum_puts_the_rows_with_most_sentence_ends_first(tmp_path):
    # rows of 6 tokens with 4, 0, 2, 1 (SEP) and 2 sentence ends
    rows = [[DOT, WORD, DOT, BANG, WORD, DOT], [WORD] * 6, [WORD, WORD, DOT, WORD, WORD, BANG],
            [WORD, WORD, SEP_ID, WORD, WORD, WORD], [DOT, WORD, WORD, WORD, WORD, DOT]]
    write_rows(tmp_path / "rows.bin", rows)
    args = (tmp_path / "rows.bin", 5, 6, np.ones(32, dtype=np.int64))
    ends = np.array([SEP_ID, DOT, BANG])
    order = row_order("length_curriculum", *args, seed=0, sentence_ends=ends).tolist()
    assert order[0] == 0 and set(order[1:3]) == {2, 4} and order[3:] == [3, 1]
    reverse = row_order("reverse_length_curriculum", *args, seed=0, sentence_ends=ends).tolist()
    assert reverse[:2] == [1, 3] and set(reverse[2:4]) == {2, 4} and reverse[4] == 0
    assert row_order("length_curriculum", *args, seed=0).tolist()[0] == 3  # default: [SEP] alone ends
    # the two rows with two ends are a tie: their order follows the seed, the same each time
    ties = {tuple(row_order("length_curriculum", *args, seed=seed, sentence_ends=ends).tolist()[1:3])
            for seed in range(8)}
    assert ties == {(2, 4), (4, 2)}
    assert row_order("length_curriculum", *args, seed=5, sentence_ends=ends).tolist() == \
        row_order("length_curriculum", *args, seed=5, sentence_ends=ends).tolist()


def test_reverse_frequency_curriculum_puts_rare_tokens_first(tmp_path):
    write_rows(tmp_path / "rows.bin", [[RARE] * 3, [WORD] * 3, [WORD, WORD, RARE]])
    counts = np.zeros(32, dtype=np.int64)
    counts[WORD], counts[RARE] = 1000, 1
    args = (tmp_path / "rows.bin", 3, 3, counts)
    assert row_order("frequency_curriculum", *args, seed=0).tolist() == [1, 2, 0]
    assert row_order("reverse_frequency_curriculum", *args, seed=0).tolist() == [0, 2, 1]


@pytest.mark.parametrize("ordering", [o for o in ORDERINGS if o not in ("shuffle", "corpus")])
def test_scoring_in_chunks_gives_the_same_order(tmp_path, monkeypatch, ordering):
    rng = np.random.default_rng(0)
    rows = rng.integers(5, 40, size=(300, 16))
    rows[rng.random(rows.shape) < 0.1] = DOT
    write_rows(tmp_path / "rows.bin", rows)
    args = (tmp_path / "rows.bin", 300, 16, np.bincount(rows.ravel(), minlength=40))
    whole = row_order(ordering, *args, seed=1, sentence_ends=np.array([DOT]))
    monkeypatch.setattr(ordering_module, "SCORE_CHUNK_ROWS", 7)
    chunked = row_order(ordering, *args, seed=1, sentence_ends=np.array([DOT]))
    assert np.array_equal(whole, chunked) and sorted(whole.tolist()) == list(range(300))


@pytest.fixture(scope="module")
def gutenberg_lines(gutenberg_valid) -> list[str]:
    with gzip.open(gutenberg_valid, "rt", encoding="utf-8") as handle:
        return [handle.readline() for _ in range(3000)]


@pytest.mark.parametrize("kind", ["wordpiece", "bpe", "unigram"])
def test_sentence_ends_of_real_tokenizers(gutenberg_lines, kind):
    tokenizer = train_tokenizer(gutenberg_lines[:600], TokenizerConfig(kind=kind, vocab_size=800), NormalizeConfig())
    vocabulary = tokenizer.get_vocab()
    ends = {tokenizer.id_to_token(int(token_id)) for token_id in sentence_end_ids(vocabulary, SEP_ID)}
    assert "[SEP]" in ends and all(re.sub("##|\u2581", "", token)[-1] in ".!?" for token in ends - {"[SEP]"})
    encoded = tokenizer.encode("It was late. Was it? Yes!", add_special_tokens=False).ids
    assert sum(token_id in sentence_end_ids(vocabulary, SEP_ID) for token_id in encoded) == 3


def sentence_lengths_in_words(text: str) -> float:
    sentences = [s for s in re.split(r"[.!?]", text) if s.strip()]
    return sum(len(s.split()) for s in sentences) / max(len(sentences), 1)


def test_length_curriculum_on_real_text_starts_with_short_sentences(gutenberg_lines, tmp_path):
    corpus = tmp_path / "book.txt"
    corpus.write_text("".join(gutenberg_lines))
    data = compose_config(["data=local", f"data.files={corpus}", "data.tokenizer.vocab_size=1000",
                           "data.validation_rows=0", "data.ordering=length_curriculum", "data.sample_by=line",
                           "data.filter.trash_cutoff=null"]).data
    dataset, _ = prepare_dataset(OmegaConf.to_object(data), tmp_path / "cache")
    tokenizer = load_tokenizer(dataset.tokenizer_path)
    ends = sentence_end_ids(tokenizer.get_vocab(), SEP_ID)
    rows = dataset.rows()[dataset.order()]  # (rows, 128) in training order
    per_row = np.isin(rows, ends).sum(axis=1)
    assert np.all(np.diff(per_row) <= 0) and per_row[0] > 3 * max(per_row[-1], 1)
    tenth = len(rows) // 10
    first, last = (" ".join(tokenizer.decode(row.tolist()) for row in part) for part in (rows[:tenth], rows[-tenth:]))
    assert sentence_lengths_in_words(first) < 0.5 * sentence_lengths_in_words(last)
    data.ordering = "shuffle"  # the same rows, another order, another dataset
    shuffled, _ = prepare_dataset(OmegaConf.to_object(data), tmp_path / "cache")
    assert shuffled.path != dataset.path
    assert shuffled.meta["sha256"]["rows.bin"] == dataset.meta["sha256"]["rows.bin"]
    assert shuffled.meta["sha256"]["order.npy"] != dataset.meta["sha256"]["order.npy"]
