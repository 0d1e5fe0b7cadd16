"""The masked positions' view of a batch: a loss beside the model's (importance sampling, distillation,
Sophia's sampled labels, validation accuracy) lines its labels and logits up the same way, whether the
model predicted every position (B, T) or, with sparse prediction, only the masked ones (B, k)."""

import torch

from cramming.model.layers import gather_rows


def labels_at_logits(batch: dict, logits: torch.Tensor) -> torch.Tensor:
    """The labels at the positions the logits are for: (B, k) on the sparse-prediction path, else (B, T)."""
    labels = batch["labels"]  # (B, T)
    return labels if logits.size(1) == labels.size(1) else labels.gather(1, batch["masked_positions"])


def logits_at_masks(batch: dict, logits: torch.Tensor) -> torch.Tensor:
    """The logits at the masked positions, (B, k, V), from either path's."""
    positions = batch["masked_positions"]  # (B, k)
    return logits if logits.size(1) == positions.size(1) else gather_rows(logits, positions)
