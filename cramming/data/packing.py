"""Encoded documents → [SEP]-separated token stream → fixed-length uint16 rows on disk."""

import itertools
from dataclasses import dataclass, field

import numpy as np
from tokenizers import Encoding

from cramming.data.filters import trash_mask
from cramming.data.vocab import SEP_ID


@dataclass
class TextBatch:
    """Documents flattened into lines for the tokenizer, with the bookkeeping to regroup them."""

    lines: list[str] = field(default_factory=list)
    lines_per_doc: list[int] = field(default_factory=list)
    chars_per_doc: list[int] = field(default_factory=list)
    origins: list[int] = field(default_factory=list)  # the source each document came from (data=mixture)
    # under data.max_tokens: per document, what had been read up to it (cramming.data.prepare._batches)
    read_so_far: list = field(default_factory=list)

    def add(self, document: list[str], origin: int = 0) -> None:
        self.lines.extend(document)
        self.lines_per_doc.append(len(document))
        self.chars_per_doc.append(sum(map(len, document)))
        self.origins.append(origin)


def documents_to_stream(batch: TextBatch, encodings: list[Encoding], trash_cutoff: float | None,
                        origin_counts: np.ndarray | None = None, limit: int | None = None):
    """Join each kept document's tokens and end it with [SEP].

    Returns (stream, documents kept, documents dropped as trash). Everything is vectorized: the only
    per-token Python work is reading the ids out of the encodings. `origin_counts`, (sources, 2) int64,
    gets each source's kept documents and tokens ([SEP] included) added in place. `limit` (data.max_tokens'
    room left) cuts the stream after that many tokens: documents starting past the cut count neither as
    kept nor as trash, the one it falls in counts as kept with the tokens before the cut.
    """
    line_tokens = np.fromiter(map(len, encodings), dtype=np.int64, count=len(encodings))
    ids = np.fromiter(
        itertools.chain.from_iterable(encoding.ids for encoding in encodings),
        dtype=np.uint16,
        count=int(line_tokens.sum()),
    )
    first_line = np.cumsum([0] + batch.lines_per_doc[:-1])
    doc_tokens = np.add.reduceat(line_tokens, first_line) if len(encodings) else line_tokens
    keep = trash_mask(doc_tokens, np.asarray(batch.chars_per_doc), trash_cutoff)
    lengths = np.where(keep, doc_tokens + 1, 0)  # (docs,) each one's tokens in the stream, [SEP] included
    trashed = ~keep
    if limit is not None:
        starts = np.cumsum(lengths) - lengths
        reached = starts < limit
        trashed &= reached
        keep &= reached
        lengths = np.clip(limit - starts, 0, lengths)
    kept_ids = ids[np.repeat(keep, doc_tokens)]
    doc_ends = np.cumsum(doc_tokens[keep])  # (kept docs,) offsets in kept_ids where each document ends
    stream = np.insert(kept_ids, doc_ends, np.uint16(SEP_ID))[:limit]
    if origin_counts is not None and len(keep):
        origins = np.asarray(batch.origins)[keep]
        np.add.at(origin_counts[:, 0], origins, 1)
        np.add.at(origin_counts[:, 1], origins, lengths[keep])
    return stream, int(keep.sum()), int(trashed.sum())


class RowWriter:
    """Appends a token stream to a file as rows of `seq_length` uint16; the remainder waits for more."""

    def __init__(self, path, seq_length: int):
        self.file = open(path, "wb")
        self.seq_length = seq_length
        self.remainder = np.empty(0, dtype=np.uint16)
        self.rows = 0

    def write(self, stream: np.ndarray) -> None:
        stream = np.concatenate([self.remainder, stream])
        full = len(stream) // self.seq_length * self.seq_length
        self.file.write(stream[:full].tobytes())
        self.rows += full // self.seq_length
        self.remainder = stream[full:]

    def close(self) -> int:
        """Close the file; returns how many trailing tokens (less than one row) were left out."""
        self.file.close()
        return len(self.remainder)
