"""Document filters. Each one counts what it dropped, so the summary says where the text went."""

import hashlib
from collections import Counter

import numpy as np

from cramming.data.config import FilterConfig
from cramming.data.source_base import Document

BAD_CHARACTERS = ("\ufffd", "\x00")  # undecodable bytes (replaced on read) and NULs: binary content
MAX_LINE_CHARS = 8192  # longer lines are cut at whitespace: the tokenizer is fastest on short strings


def split_long_line(line: str, limit: int = MAX_LINE_CHARS) -> list[str]:
    """Cut a line into pieces of at most `limit` characters, at whitespace where there is some."""
    pieces = []
    while len(line) > limit:
        cut = line.rfind(" ", limit // 2, limit)
        cut = limit if cut < 0 else cut
        pieces.append(line[:cut])
        line = line[cut:]
    pieces.append(line)
    return pieces


class DocumentFilter:
    """The filters that need no tokenizer: length, bad bytes, exact and near duplicates, oversize documents."""

    def __init__(self, cfg: FilterConfig, max_doc_chars: int):
        self.cfg = cfg
        self.max_doc_chars = max_doc_chars
        self.seen_hashes: set[bytes] = set()
        self.near_duplicates = None
        if cfg.near_dedup_threshold:  # datasketch (and scipy under it) only where it is used, not in every process
            from cramming.data.near_dedup import NearDuplicates  # noqa: PLC0415 -- datasketch, as said above

            self.near_duplicates = NearDuplicates(cfg.near_dedup_threshold)
        self.counts: Counter[str] = Counter()

    def __call__(self, document: Document) -> list[Document]:
        """The document's kept parts: [] if dropped, several if it was cut for length."""
        self.counts["documents_read"] += 1
        if not document:  # a record without text (cramming.data.source_base.split_records)
            self.counts["dropped_no_text"] += 1
            return []
        text = "\n".join(document)  # one string, so every check below is a single pass in C
        chars = len(text) - len(document) + 1
        if chars < self.cfg.min_chars or text.isspace():
            self.counts["dropped_too_short"] += 1
            return []
        if sum(text.count(char) for char in BAD_CHARACTERS) > self.cfg.max_bad_char_fraction * chars:
            self.counts["dropped_bad_bytes"] += 1
            return []
        if self.cfg.deduplicate:
            digest = hashlib.blake2b(text.encode(errors="replace"), digest_size=16).digest()
            if digest in self.seen_hashes:
                self.counts["dropped_duplicate"] += 1
                return []
            self.seen_hashes.add(digest)
        if self.near_duplicates is not None and self.near_duplicates.is_duplicate(text):
            self.counts["dropped_near_duplicate"] += 1
            return []
        if any(len(line) > MAX_LINE_CHARS for line in document):
            document = [piece for line in document for piece in split_long_line(line)]
        if chars <= self.max_doc_chars:
            return [document]
        parts = list(_cut_document(document, self.max_doc_chars))
        self.counts["cut_for_length"] += 1
        self.counts["pieces_from_cuts"] += len(parts) - 1
        return parts


def _cut_document(document: Document, max_chars: int):
    part, part_chars = [], 0
    for line in document:
        if part and part_chars + len(line) > max_chars:
            yield part
            part, part_chars = [], 0
        part.append(line)
        part_chars += len(line)
    if part:
        yield part


def trash_mask(doc_tokens: np.ndarray, doc_chars: np.ndarray, cutoff: float | None) -> np.ndarray:
    """True for documents to keep: at most `cutoff` tokens per character (None keeps all).

    Text the tokenizer finds hard (tables, markup, foreign scripts, OCR noise) needs many tokens per
    character; cramming drops it because it teaches the model little per step.
    """
    if cutoff is None:
        return np.ones(len(doc_tokens), dtype=bool)
    return doc_tokens <= cutoff * np.maximum(doc_chars, 1)


def median_tokens_per_char(doc_tokens: np.ndarray, doc_chars: np.ndarray) -> float:
    """The tokens-per-character ratio of the median character: documents' ratios, each weighted by its
    length (so a few short headings cannot move it)."""
    chars = np.maximum(np.asarray(doc_chars, dtype=np.float64), 1)
    ratios = np.asarray(doc_tokens, dtype=np.float64) / chars
    order = np.argsort(ratios, kind="stable")
    middle = np.searchsorted(np.cumsum(chars[order]), chars.sum() / 2)
    return float(ratios[order][min(middle, len(order) - 1)])


def trash_cutoff(cfg: FilterConfig, median_ratio: float | None) -> float | None:
    """The cutoff in tokens per character that `trash_mask` applies: data.filter.trash_cutoff itself, or
    with trash_cutoff_scaling=median that multiple of the corpus's median ratio."""
    if cfg.trash_cutoff is None or cfg.trash_cutoff_scaling == "none":
        return cfg.trash_cutoff
    return cfg.trash_cutoff * median_ratio
