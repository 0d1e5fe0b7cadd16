"""Importance sampling of training sequences by their last-seen loss: `train.sampling=importance`.

Sequences that the model still predicts badly carry larger gradients; their loss when last seen is a
free proxy for that (Katharopoulos & Fleuret, 2018, "Not All Samples Are Created Equal: Deep Learning
with Importance Sampling", use the loss the same way; no extra forward pass here). Each microbatch draws
its rows with replacement from all N training rows with probability

    p_i = 0.9 * loss_i / sum(loss) + 0.1 / N

(rows not yet seen count at the largest loss seen so far, so they are drawn early; the uniform tenth
keeps every row reachable and every weight at most 10), and weights each row's loss by 1 / (N p_i), so
the weighted mean loss is an unbiased estimate of the mean over the data. The gradient is the weighted
loss's; the loss recorded is the weighted one too.

Bookkeeping: one float per training row (4 bytes; kept in the checkpoint, so a resumed run draws exactly
what an uninterrupted one would), an O(N) draw per microbatch in the training process (it needs the
losses of the microbatch before; no loader workers, and on a GPU it waits for that microbatch's forward
pass), and one cross-entropy over the masked positions'
logits per microbatch for the per-sequence losses.
"""

import numpy as np
import torch
import torch.nn.functional as F

from cramming.data.mlm import IGNORE_INDEX, labels_at_logits
from cramming.data.stream import Microbatches
from cramming.errors import CrammingError, require
from cramming.plugins import Setting
from cramming.train.callbacks import TrainState
from cramming.train.techniques.base import RunContext, Technique

UNIFORM_SHARE = 0.1  # of each row's probability that is uniform: weights stay <= 1 / UNIFORM_SHARE
SAMPLINGS = ("sequential", "importance")  # train.sampling: the prepared data order, or this


class ImportanceSampling(Technique):
    name, override = "importance-sampling", "train.sampling=importance"
    switch, switch_value = "train.sampling", "importance"
    # sequential: the prepared data order | importance: rows drawn by their last-seen loss, importance-weighted
    settings = (Setting("train.sampling", str, "sequential"),)

    def __init__(self, seed: int):
        self.seed = seed
        self.losses: np.ndarray | None = None  # (N,) last-seen loss per row position; NaN: not seen yet
        self.pending: list[tuple[torch.Tensor, torch.Tensor]] = []  # (positions, losses) not yet in `losses`

    @classmethod
    def check(cls, cfg) -> None:
        require([(cfg.train.sampling in SAMPLINGS,
                  f"train.sampling={cfg.train.sampling!r} must be one of {', '.join(SAMPLINGS)}")])

    @classmethod
    def build(cls, cfg, run: RunContext) -> "ImportanceSampling":
        if run.world_size > 1:
            raise CrammingError("train.sampling=importance keeps one loss table per process, which ranks under "
                                "torchrun would not share: run it on one GPU")
        return cls(cfg.train.seed)

    def stream(self, microbatches: Microbatches, start: int):
        """Endless microbatches from global microbatch `start` on, each drawn by the current losses."""
        if self.losses is None:
            self.losses = np.full(len(microbatches.rows), np.nan, dtype=np.float32)
        for index in range(start, 2**62):
            yield self._draw(microbatches, index)

    def probabilities(self) -> np.ndarray:
        self._record_pending()
        seen = ~np.isnan(self.losses)  # a non-finite loss is recorded as not seen
        if not seen.any() or self.losses[seen].max() <= 0:
            return np.full(len(self.losses), 1.0 / len(self.losses))
        losses = np.where(seen, self.losses, self.losses[seen].max()).astype(np.float64)
        return (1 - UNIFORM_SHARE) * losses / losses.sum() + UNIFORM_SHARE / len(losses)

    def _draw(self, microbatches: Microbatches, index: int) -> dict[str, torch.Tensor]:
        rng = np.random.default_rng([self.seed, index, 7])  # per microbatch: the same draws after a resume
        probabilities = self.probabilities()
        positions = rng.choice(len(probabilities), size=microbatches.microbatch_size, p=probabilities)
        rows = np.stack([microbatches.rows[position]["input_ids"] for position in positions]).astype(np.int64)
        batch = microbatches.collate.masked_batch(rows, rng)  # (B, T) tensors
        weights = 1.0 / (len(probabilities) * probabilities[positions])  # (B,)
        return {**batch, "sample_positions": torch.from_numpy(positions),
                "sample_weights": torch.from_numpy(weights.astype(np.float32))}

    def after_forward(self, state: TrainState, batch: dict, loss: torch.Tensor, output) -> torch.Tensor:
        """The importance-weighted loss over the masked tokens; records each row's (unweighted) loss."""
        logits = output.logits  # (B, k, V) on the sparse-prediction path, else (B, T, V)
        labels = labels_at_logits(batch, logits)  # (B, k or T)
        token_losses = F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(), ignore_index=IGNORE_INDEX,
                                       reduction="none").view(labels.shape)  # (B, k or T)
        counted = (labels != IGNORE_INDEX).float()
        weights = batch["sample_weights"].to(token_losses.dtype)[:, None]  # (B, 1)
        row_losses = (token_losses.detach() * counted).sum(1) / counted.sum(1).clamp(min=1)  # (B,)
        self.pending.append((batch["sample_positions"], row_losses))  # read at the next draw: no wait here
        return (weights * token_losses * counted).sum() / counted.sum()

    def _record_pending(self) -> None:
        for positions, row_losses in self.pending:
            row_losses = row_losses.cpu().numpy()
            self.losses[positions.cpu().numpy()] = np.where(np.isfinite(row_losses), row_losses, np.nan)
        self.pending = []

    def state_dict(self) -> dict:
        if self.losses is None:
            return {}
        self._record_pending()
        return {"losses": torch.from_numpy(self.losses.copy())}

    def load_state_dict(self, state: dict) -> None:
        self.losses = state["losses"].numpy().copy()
