"""The order in which training visits the stored rows, saved as an index so rows are written only once."""

import numpy as np

from cramming.errors import CrammingError

ORDERINGS = ("shuffle", "frequency_curriculum", "corpus")
SCORE_CHUNK_ROWS = 65536


def row_order(ordering: str, rows_path, num_rows: int, seq_length: int, token_counts: np.ndarray, seed: int):
    """Indices into the stored rows, (num_rows,) uint32.

    - shuffle: a seeded permutation.
    - frequency_curriculum: rows made of common tokens first, rare-token rows last (mean log-frequency
      of a row's tokens), ties in shuffled order: easy text early, as in curriculum learning.
    - corpus: the order the text was read in.
    """
    if ordering not in ORDERINGS:
        raise CrammingError(f"data.ordering={ordering!r} is unknown; choose one of {', '.join(ORDERINGS)}")
    if ordering == "corpus":
        return np.arange(num_rows, dtype=np.uint32)
    permutation = np.random.default_rng(seed).permutation(num_rows).astype(np.uint32)
    if ordering == "shuffle":
        return permutation
    log_frequency = np.log1p(token_counts).astype(np.float32)
    scores = np.empty(num_rows, dtype=np.float32)
    for start in range(0, num_rows, SCORE_CHUNK_ROWS):
        count = min(SCORE_CHUNK_ROWS, num_rows - start)
        chunk = np.fromfile(rows_path, dtype=np.uint16, count=count * seq_length, offset=start * seq_length * 2)
        scores[start : start + count] = log_frequency[chunk.reshape(count, seq_length)].mean(axis=1)
    return permutation[np.argsort(-scores[permutation], kind="stable")]
