"""Preparation's progress: one tqdm bar on stderr, measured against whatever bounds the work, so it has an ETA.

    data.max_tokens set      tokens packed, of the cap
    data.max_documents set   documents read, of the cap
    size known up front      characters read (≈ bytes of English text), of the files' size
    otherwise (a hub stream) documents read and their rate, with the tokens packed so far beside them

Shown as every long phase is (cramming.phase_progress): a bar on a terminal, a line every few seconds in a log
file. Reading runs in a thread of its own (cramming.data.prepare), so `read` and `packed` come from two threads;
each counter has one writer.
"""

import logging

from cramming.data.config import DataBaseConfig
from cramming.phase_progress import PhaseProgress

log = logging.getLogger("cramming.data.prepare")


class PreparationProgress:
    def __init__(self, cfg: DataBaseConfig, total_bytes: int | None, num_sources: int = 1):
        if cfg.max_tokens is not None:
            self.measure, total = "tokens", cfg.max_tokens
        elif cfg.max_documents is not None:
            self.measure, total = "documents", cfg.max_documents
        elif total_bytes is not None:
            self.measure, total = "bytes", total_bytes
        else:
            self.measure, total = "documents", None
        self.bar = PhaseProgress("tokenizing", total, self.measure, log)
        self.bytes = 0  # characters of the documents read, ≈ bytes (not counting blank lines between them)
        self.read_per_source = [0] * num_sources
        self.tokens = 0

    def read(self, origin: int, document: list[str]) -> None:
        """A document was read (reader thread)."""
        chars = sum(map(len, document)) + len(document)
        self.bytes += chars
        self.read_per_source[origin] += 1
        if self.measure == "bytes":
            self.bar.advance(chars)
        elif self.measure == "documents":
            self.bar.advance(1)

    def packed(self, tokens: int) -> None:
        """Tokens went into the rows (main thread)."""
        self.tokens += tokens
        if self.measure == "tokens":
            self.bar.advance(tokens)
        elif self.bar.total is None:
            self.bar.note = f"{self.tokens:,} tokens"

    def close(self) -> None:
        self.bar.close()
