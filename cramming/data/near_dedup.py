"""Near-duplicate removal: `data.filter.near_dedup_threshold=<Jaccard>` (null: off).

Documents are compared by the Jaccard similarity of their sets of word 5-grams (Broder, 1997, "On the
resemblance and containment of documents"), through 128-value MinHash signatures and locality-sensitive
hashing: datasketch's MinHashLSH, whose bands and rows it tunes to the threshold. A document that LSH
pairs with one kept earlier is dropped and counted (the first of a group is kept). LSH decides by
probability, not by a cut: at threshold 0.8 (9 bands of 13) a pair of similarity J is caught with
probability 1 - (1 - J^13)^9, 0.40 at J = 0.8, 0.93 at 0.9 and over 0.998 from 0.95.

The signatures are one-permutation MinHash (Li, Owen & Zhang, 2012, "One Permutation Hashing"): each
shingle is hashed once and falls in one of 128 bins, each bin keeping its minimum; empty bins borrow
from the next filled one (Shrivastava & Li, 2014, "Densifying One Permutation Hashing"). That is 128x
less hashing than classic MinHash, which is what makes a pass over a 480 MB corpus affordable. The
hashes are computed with numpy over the text's UTF-8 bytes, the same on every run and machine. Words are
split at whitespace, so text written without spaces (Chinese, Thai) counts whole lines as words.
"""

import numpy as np
from datasketch import LeanMinHash, MinHashLSH

NUM_BINS = 128
SHINGLE_WORDS = 5
CHUNK_BYTES = 1 << 22  # hash the text in pieces of this size: bounded memory for very long documents
_WORD_POWERS = np.uint64(0x9E3779B97F4A7C15) ** np.arange(64, dtype=np.uint64)  # per position in a word (mod 2^64)
_SHINGLE_KEYS = (np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB), np.uint64(0xD6E8FEB86659FD93),
                 np.uint64(0xA0761D6478BD642F), np.uint64(0xE7037ED1A0B428DB))
_EMPTY = np.uint64(np.iinfo(np.uint64).max)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer: every input bit moves every output bit."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def word_hashes(text: str) -> np.ndarray:
    """A 64-bit hash of each whitespace-separated word, in order: (words,) uint64."""
    hashes = []
    data = np.frombuffer(text.encode("utf-8", errors="replace"), dtype=np.uint8)
    for start in range(0, len(data), CHUNK_BYTES):
        chunk = data[start:start + CHUNK_BYTES]
        in_word = chunk > 32  # spaces, tabs, newlines and other control bytes separate words
        if not in_word.any():
            continue
        index = np.arange(len(chunk))
        first = in_word & ~np.r_[False, in_word[:-1]]  # (n,) the first byte of each word
        word_start = np.maximum.accumulate(np.where(first, index, 0))  # (n,) where each byte's word begins
        weighted = (chunk.astype(np.uint64) + np.uint64(1)) * _WORD_POWERS[(index - word_start) & 63]
        weighted[~in_word] = 0
        hashes.append(_mix(np.add.reduceat(weighted, np.flatnonzero(first))))  # (words in chunk,)
    return np.concatenate(hashes) if hashes else np.zeros(0, dtype=np.uint64)


def signature(text: str) -> np.ndarray:
    """The document's densified one-permutation MinHash over its word 5-grams (fewer words: the words):
    (NUM_BINS,) uint64."""
    words = word_hashes(text)
    if len(words) >= SHINGLE_WORDS:
        count = len(words) - SHINGLE_WORDS + 1
        shingles = sum(words[i:i + count] * key for i, key in enumerate(_SHINGLE_KEYS))  # (count,)
        hashes = _mix(shingles)
    else:
        hashes = _mix(words)
    bins = (hashes >> np.uint64(57)).astype(np.intp)  # the top 7 bits pick one of 128 bins
    values = hashes & np.uint64((1 << 57) - 1)
    sketch = np.full(NUM_BINS, _EMPTY)
    np.minimum.at(sketch, bins, values)
    filled = np.flatnonzero(sketch != _EMPTY)
    if 0 < len(filled) < NUM_BINS:  # an empty bin takes the next filled bin's value, offset by the distance
        ahead = np.searchsorted(filled, np.arange(NUM_BINS)) % len(filled)
        source = filled[ahead]
        distance = ((source - np.arange(NUM_BINS)) % NUM_BINS).astype(np.uint64)
        sketch = np.where(sketch == _EMPTY, sketch[source] + distance * np.uint64(1 << 57), sketch)
    return sketch


class NearDuplicates:
    """Streams documents through MinHash LSH: `is_duplicate(text)` is True for a near-copy of a document
    seen before (which stays kept); otherwise the text is remembered. About 4 KB of memory per kept
    document at threshold 0.8 (LSH tables of 9 bands; lower thresholds use more bands)."""

    def __init__(self, threshold: float):
        self.lsh = MinHashLSH(threshold=threshold, num_perm=NUM_BINS)
        self.kept = 0

    def is_duplicate(self, text: str) -> bool:
        sketch = LeanMinHash(seed=0, hashvalues=signature(text), scheme="affine64")  # 64-bit values
        if self.lsh.query(sketch):
            return True
        self.lsh.insert(self.kept, sketch)
        self.kept += 1
        return False
