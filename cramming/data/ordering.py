"""The order in which training visits the stored rows, saved as an index so rows are written only once.

The curricula score every row (read in chunks of SCORE_CHUNK_ROWS, so memory is 4 bytes per row whatever
the corpus size) and sort by score; rows with equal scores keep a seeded random order.
"""

import numpy as np

from cramming.data.config import ORDERINGS
from cramming.data.vocab import SEP_ID
from cramming.errors import CrammingError

SCORE_CHUNK_ROWS = 65536
SENTENCE_END_CHARACTERS = ".!?"


def sentence_end_ids(vocabulary: dict[str, int], sep_id: int) -> np.ndarray:
    """Ids of the tokens that end a sentence: [SEP] (a document ends there), and every token whose text,
    without the word-piece markers (## and the Metaspace ▁), ends in . ! or ?. WordPiece and BPE split
    punctuation off, so there these are ".", "!", "?" and runs like "..."; a Unigram piece may carry the
    stop on a word ("s."), which counts too."""
    ends = [sep_id] + [
        token_id for token, token_id in vocabulary.items()
        if token.replace("##", "").replace("\u2581", "").endswith(tuple(SENTENCE_END_CHARACTERS))
    ]
    return np.unique(np.asarray(ends, dtype=np.int64))


def row_order(ordering: str, rows_path, num_rows: int, seq_length: int, token_counts: np.ndarray, seed: int,
              sentence_ends: np.ndarray | None = None):
    """Indices into the stored rows, (num_rows,) uint32.

    - shuffle: a seeded permutation.
    - corpus: the order the text was read in.
    - frequency_curriculum: rows made of common tokens first, rare-token rows last (mean log-frequency
      of a row's tokens): easy text early, as in curriculum learning. reverse_frequency_curriculum: rare
      first (the reference's `unigram-curriculum`), the anti-curriculum control.
    - length_curriculum: rows of short sentences first: rows with the most sentence ends (the ids in
      `sentence_ends`, default [SEP] only) first, i.e. the shortest mean sentence length, 128 tokens over
      the number of ends. reverse_length_curriculum: long sentences first.
    Ties keep the seeded shuffle's order.
    """
    if ordering not in ORDERINGS:
        raise CrammingError(f"data.ordering={ordering!r} is unknown; choose one of {', '.join(ORDERINGS)}")
    if ordering == "corpus":
        return np.arange(num_rows, dtype=np.uint32)
    permutation = np.random.default_rng(seed).permutation(num_rows).astype(np.uint32)
    if ordering == "shuffle":
        return permutation
    score_rows = _scorer(ordering, token_counts, sentence_ends)
    scores = np.empty(num_rows, dtype=np.float32)
    for start in range(0, num_rows, SCORE_CHUNK_ROWS):
        count = min(SCORE_CHUNK_ROWS, num_rows - start)
        chunk = np.fromfile(rows_path, dtype=np.uint16, count=count * seq_length, offset=start * seq_length * 2)
        scores[start : start + count] = score_rows(chunk.reshape(count, seq_length))
    descending = not ordering.startswith("reverse_")  # the high score (common tokens, many ends) first
    return permutation[np.argsort(-scores[permutation] if descending else scores[permutation], kind="stable")]


def _scorer(ordering: str, token_counts: np.ndarray, sentence_ends: np.ndarray | None):
    """(count, seq_length) rows → (count,) float32 scores, high first in the curriculum."""
    if ordering.endswith("frequency_curriculum"):
        log_frequency = np.log1p(token_counts).astype(np.float32)

        def mean_log_frequency(rows):
            return log_frequency[rows].mean(axis=1)

        return mean_log_frequency
    is_end = np.zeros(max(len(token_counts), 65536), dtype=bool)  # any uint16 id indexes it
    is_end[SEP_ID if sentence_ends is None else sentence_ends] = True

    def sentence_ends_in_row(rows):
        return is_end[rows].sum(axis=1, dtype=np.int32).astype(np.float32)

    return sentence_ends_in_row
