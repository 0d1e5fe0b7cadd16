"""MLM batches: a dataset over the stored rows, a masking collator with an exact mask count per row, and the
masked positions' view of a batch: a loss beside the model's (importance sampling, distillation, Sophia's
sampled labels, z-loss, validation accuracy) lines its labels and logits up the same way, whether the model
predicted every position (B, T) or, with sparse prediction, only the masked ones (B, k)."""

import numpy as np
import torch
from torch.utils.data import Dataset

from cramming.data.store import PreparedDataset
from cramming.data.vocab import MASK_ID, SPECIAL_TOKENS
from cramming.errors import CrammingError

IGNORE_INDEX = -100  # label of every position that is not predicted


class PackedRows(Dataset):
    """Rows in the stored order: position p is stored row order[p mod N], N the training rows (the held-out
    validation rows at the end of the order are never reached), or every row with `held_out=True`.

    Positions past the end wrap around into the next epoch; the collator seeds masks by position, so
    every epoch masks the same rows differently.
    """

    def __init__(self, dataset: PreparedDataset, held_out: bool = False):
        self.rows = dataset.rows()
        self.order = dataset.order()
        self.length = dataset.num_rows if held_out else dataset.training_rows

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, position: int) -> dict:
        return {"position": position, "input_ids": np.asarray(self.rows[self.order[position % self.length]])}

    def batch(self, start: int, size: int) -> list[dict]:
        return [self[position] for position in range(start, start + size)]


def masked_count(seq_length: int, mlm_rate: float) -> int:
    return round(mlm_rate * seq_length)


class MLMCollator:
    """Stack rows and mask exactly `round(mlm_rate * T)` positions per row, never a special token.

    Of the chosen positions 80% become [MASK], 10% a random non-special token, 10% stay (BERT's rule).
    The random state is derived from (seed, position of the batch's first row), so a batch is the same
    whichever worker builds it and whenever a run resumes.

    Returns int64 tensors: input_ids (B, T); labels (B, T), IGNORE_INDEX except at masked positions;
    masked_positions (B, k), sorted, a static shape for sparse prediction. A row with fewer than k
    maskable tokens still gets k positions; the extra ones keep their token and IGNORE_INDEX labels.
    """

    def __init__(self, vocab_size: int, mlm_rate: float = 0.25, seed: int = 0):
        if not 0.0 < mlm_rate < 1.0:
            raise CrammingError(f"mlm_rate={mlm_rate} must be between 0 and 1")
        self.vocab_size = vocab_size
        self.mlm_rate = mlm_rate
        self.seed = seed
        self.first_regular_id = len(SPECIAL_TOKENS)

    def __call__(self, items: list[dict]) -> dict[str, torch.Tensor]:
        rows = np.stack([item["input_ids"] for item in items]).astype(np.int64)  # (B, T)
        return self.masked_batch(rows, np.random.default_rng([self.seed, items[0]["position"]]))

    def masked_batch(self, rows: np.ndarray, rng: np.random.Generator) -> dict[str, torch.Tensor]:
        input_ids, labels, positions = self.mask(rows, rng)
        return {
            "input_ids": torch.from_numpy(input_ids),
            "labels": torch.from_numpy(labels),
            "masked_positions": torch.from_numpy(positions),
        }

    def mask(self, rows: np.ndarray, rng: np.random.Generator):
        batch, seq_length = rows.shape
        k = masked_count(seq_length, self.mlm_rate)
        maskable = rows >= self.first_regular_id
        scores = rng.random((batch, seq_length))
        scores[~maskable] = -1.0  # specials are chosen only when a row runs out of regular tokens
        positions = np.sort(np.argpartition(-scores, k - 1, axis=1)[:, :k], axis=1)  # (B, k)
        chosen_is_regular = np.take_along_axis(maskable, positions, axis=1)

        labels = np.full_like(rows, IGNORE_INDEX)
        chosen_tokens = np.take_along_axis(rows, positions, axis=1)
        np.put_along_axis(labels, positions, np.where(chosen_is_regular, chosen_tokens, IGNORE_INDEX), axis=1)

        action = rng.random((batch, k))  # < 0.8: [MASK]; < 0.9: random token; else: keep
        random_tokens = rng.integers(self.first_regular_id, self.vocab_size, size=(batch, k))
        replacement = np.where(action < 0.8, MASK_ID, np.where(action < 0.9, random_tokens, chosen_tokens))
        input_ids = rows.copy()
        np.put_along_axis(input_ids, positions, np.where(chosen_is_regular, replacement, chosen_tokens), axis=1)
        return input_ids, labels, positions


def synthetic_mlm_batch(batch_size: int, seq_length: int, vocab_size: int, mlm_rate: float,
                        seed: int = 0) -> dict[str, torch.Tensor]:
    """Random regular tokens, masked as the collator masks real rows: the shapes and the work of a real
    batch without a corpus, for timing (benchmark, calculator) and the microbatch memory search."""
    rng = np.random.default_rng(seed)
    rows = rng.integers(len(SPECIAL_TOKENS), vocab_size, size=(batch_size, seq_length), dtype=np.int64)
    return MLMCollator(vocab_size, mlm_rate, seed).masked_batch(rows, rng)


def labels_at_logits(batch: dict, logits: torch.Tensor) -> torch.Tensor:
    """The labels at the positions the logits are for: (B, k) on the sparse-prediction path, else (B, T)."""
    labels = batch["labels"]  # (B, T)
    return labels if logits.size(1) == labels.size(1) else labels.gather(1, batch["masked_positions"])


def logits_at_masks(batch: dict, logits: torch.Tensor) -> torch.Tensor:
    """The logits at the masked positions, (B, k, V), from either path's."""
    positions = batch["masked_positions"]  # (B, k)
    if logits.size(1) == positions.size(1):
        return logits
    return logits.gather(1, positions[:, :, None].expand(-1, -1, logits.size(-1)))  # (B, T, V) -> (B, k, V)
