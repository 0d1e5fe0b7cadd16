"""The pseudo-log-likelihood of a sentence under a masked LM (Salazar et al. 2020): mask each token in turn and sum
the log-probabilities of the true tokens. `pll-word-l2r` (Kauf & Ivanova 2023, the default) also masks the tokens
to the right inside the same word, so a word split into several tokens is not scored from its own later pieces;
`pll` is the original. Special tokens ([CLS], [SEP]) are context, never scored.

One sentence of n scored tokens is n masked rows; all rows of all sentences run in batches sorted by length, and
each row's log-probability is added to its sentence's sum. Padding and batch composition do not change a score
(tests/eval/test_pll.py).
"""

import dataclasses
from typing import Callable, Iterable, Protocol, Sequence

import numpy as np
import torch

from cramming.errors import CrammingError

METHODS = ("pll-word-l2r", "pll")
DEFAULT_METHOD = "pll-word-l2r"
CHUNK_SENTENCES = 4096  # sentences whose masked rows are built and run together (bounds the host memory)


class MaskedLM(Protocol):
    """What the scorer needs of a model: its tokenizer, its device and `log_probs`."""

    tokenizer: object  # a transformers fast tokenizer (word_ids() marks the words)
    device: torch.device

    def log_probs(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """input_ids, attention_mask (B, T); positions (B,): log-softmax over the vocabulary at each row's
        position, (B, V) in fp32."""


@dataclasses.dataclass
class Scores:
    """Per text: the PLL in nats (a sum of log-probabilities, <= 0) and how many tokens it scored."""

    pll: np.ndarray  # (N,) float64
    tokens: np.ndarray  # (N,) int64
    rows: int  # masked rows run


def encode(tokenizer, texts: Sequence[str]) -> list[tuple[np.ndarray, np.ndarray]]:
    """Each text's token ids (with the tokenizer's special tokens) and word index per token (-1: special)."""
    encoded = tokenizer(list(texts), add_special_tokens=True, truncation=True)
    out = []
    for index, ids in enumerate(encoded["input_ids"]):
        words = encoded.word_ids(index)
        out.append((np.asarray(ids, dtype=np.int64), np.asarray([-1 if w is None else w for w in words], np.int64)))
    return out


def masked_rows(ids: np.ndarray, words: np.ndarray, mask_id: int, method: str) -> tuple[np.ndarray, np.ndarray]:
    """The rows that score one sentence: (k, T) ids with the masks in, and the position each row scores (k,)."""
    positions = np.flatnonzero(words >= 0)
    columns = np.arange(len(ids))
    masked = columns[None, :] == positions[:, None]  # (k, T)
    if method == "pll-word-l2r":  # and the later tokens of the same word
        masked |= (words[None, :] == words[positions][:, None]) & (columns[None, :] > positions[:, None])
    rows = np.where(masked, mask_id, ids[None, :])
    return rows, positions


def check_method(method: str, key: str = "method") -> None:
    if method not in METHODS:
        raise CrammingError(f"{key}={method!r} must be one of {', '.join(METHODS)}")


def count_rows(sentences: Sequence[tuple[np.ndarray, np.ndarray]]) -> int:
    """The masked rows that score these encoded sentences: one per scored (non-special) token."""
    return sum(int((words >= 0).sum()) for _, words in sentences)


@torch.no_grad()
def score_texts(lm: MaskedLM, texts: Sequence[str], method: str = DEFAULT_METHOD, batch_size: int = 256,
                on_rows: Callable[[int], None] | None = None) -> Scores:
    """The PLL of each text (nats) and its number of scored tokens, `batch_size` masked rows per forward pass;
    `on_rows(n)` after each batch of n rows (a phase's progress)."""
    check_method(method)
    sentences = encode(lm.tokenizer, texts)
    return score_encoded(lm, sentences, method, batch_size, on_rows)


def score_encoded(lm: MaskedLM, sentences: Sequence[tuple[np.ndarray, np.ndarray]], method: str,
                  batch_size: int, on_rows: Callable[[int], None] | None = None) -> Scores:
    """score_texts on texts already encoded (`encode`)."""
    pll = np.zeros(len(sentences), dtype=np.float64)
    tokens = np.zeros(len(sentences), dtype=np.int64)
    rows_run = 0
    for start in range(0, len(sentences), CHUNK_SENTENCES):
        chunk = range(start, min(start + CHUNK_SENTENCES, len(sentences)))
        rows = _chunk_rows(lm.tokenizer.mask_token_id, sentences, chunk, method)
        rows_run += len(rows.ids)
        for owners, values in _run_rows(lm, rows, batch_size):
            np.add.at(pll, owners, values)
            np.add.at(tokens, owners, 1)
            if on_rows is not None:
                on_rows(len(owners))
    return Scores(pll, tokens, rows_run)


@dataclasses.dataclass
class _Rows:
    ids: list[np.ndarray]  # each row's token ids, masks in
    owners: np.ndarray  # the sentence each row scores
    positions: np.ndarray  # the position it scores
    targets: np.ndarray  # the true token there


def _chunk_rows(mask_id: int, sentences, chunk: Iterable[int], method: str) -> _Rows:
    """Every masked row of the chunk's sentences, shortest first."""
    ids, owners, positions, targets = [], [], [], []
    for index in chunk:
        sentence, words = sentences[index]
        rows, scored = masked_rows(sentence, words, mask_id, method)
        ids.extend(rows)
        owners.append(np.full(len(scored), index, np.int64))
        positions.append(scored)
        targets.append(sentence[scored])
    order = np.argsort([len(row) for row in ids], kind="stable")
    joined = (np.concatenate(part)[order] if part else np.zeros(0, np.int64) for part in (owners, positions, targets))
    return _Rows([ids[i] for i in order], *joined)


def _run_rows(lm: MaskedLM, rows: _Rows, batch_size: int):
    """(the sentences, the log-probability of each row's true token), one batch at a time."""
    pad_id = lm.tokenizer.pad_token_id or 0
    for start in range(0, len(rows.ids), batch_size):
        batch = rows.ids[start:start + batch_size]
        width = max(len(row) for row in batch)
        input_ids = np.full((len(batch), width), pad_id, dtype=np.int64)
        attention_mask = np.zeros((len(batch), width), dtype=np.int64)
        for index, row in enumerate(batch):
            input_ids[index, :len(row)] = row
            attention_mask[index, :len(row)] = 1
        part = slice(start, start + len(batch))
        as_tensor = lambda array: torch.from_numpy(np.ascontiguousarray(array)).to(lm.device)  # noqa: E731
        log_probs = lm.log_probs(as_tensor(input_ids), as_tensor(attention_mask), as_tensor(rows.positions[part]))
        chosen = log_probs.gather(1, as_tensor(rows.targets[part])[:, None])[:, 0]  # (B,)
        yield rows.owners[part], chosen.double().cpu().numpy()
