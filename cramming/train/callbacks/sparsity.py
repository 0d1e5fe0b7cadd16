"""Sparse training of the encoder's weight matrices: `train.sparsity.method=magnitude | rigl |
semi-structured-2:4 | lottery` with `train.sparsity.density=<d>` (the fraction of weights kept).

- magnitude: gradual magnitude pruning (Zhu & Gupta, 2017, "To prune, or not to prune"): dense until
  progress `start`, then the density falls as d + (1 - d)(1 - s)^3 over s in [0, 1] from `start` to `end`,
  each matrix pruned to it by weight magnitude at every step the target moves by 1% or more.
- rigl: RigL (Evci et al., 2020, "Rigging the Lottery: Making All Tickets Winners"): sparse from the
  start at density d (random masks), and every `update_every` steps until `end` the smallest-magnitude
  active weights (a fraction 0.3 (1 + cos(pi f / end)) / 2 of them) are dropped and as many inactive
  ones with the largest gradient regrown, starting at zero.
- semi-structured-2:4: the pattern NVIDIA's sparse tensor cores run (Ampere and later; Mishra et al.,
  2021, "Accelerating Sparse Deep Neural Networks"): dense until progress `start`, then in every group of
  4 consecutive weights of a row the 2 smallest are pruned once, and the mask stays (the ASP recipe:
  prune, then train on with the mask).
- lottery: the lottery ticket (Frankle & Carbin, 2019, "The Lottery Ticket Hypothesis"; with rewinding,
  Frankle et al., 2020, "Linear Mode Connectivity and the Lottery Ticket Hypothesis"): the masks keep the
  largest-magnitude weights of a finished dense run's final model (`ticket`), and training starts from
  that run's initialization (or the kept early checkpoint `rewind` names) with only those weights.

Which weights: every 2-D matrix inside the encoder's layers (attention and feed-forward); embeddings,
norms and heads stay dense. Masks are applied after every optimizer step (pruned weights still get
gradients, so the optimizer's moments keep tracking them) and kept in the checkpoint, so a resumed run
continues exactly. Honest cost: the kernels stay dense, so a masked model is no faster;
`sparse_flops_fraction` in the log says what share of the layers' matmul FLOPs a sparse kernel would need.
"""

import logging
import math
from pathlib import Path

import torch

from cramming.model.checkpoint import load_weights, read_weights
from cramming.train.callbacks import Callback
from cramming.train.state import TrainState

log = logging.getLogger("pretrain")
RIGL_DROP_FRACTION = 0.3


def sparse_matrices(model: torch.nn.Module) -> dict[str, torch.nn.Parameter]:
    """The weights that sparsity prunes: 2-D matrices inside the encoder's layers, by name."""
    return {name: p for name, p in model.named_parameters() if p.dim() == 2 and ".layer." in f".{name}"}


def magnitude_mask(weight: torch.Tensor, density: float) -> torch.Tensor:
    """True for the round(density * n) largest-magnitude entries of weight."""
    keep = max(1, round(density * weight.numel()))
    threshold = weight.abs().flatten().kthvalue(weight.numel() - keep + 1).values
    mask = weight.abs() >= threshold
    if mask.sum() > keep:  # ties at the threshold: keep the first ones
        order = weight.abs().flatten().argsort(descending=True, stable=True)
        mask = torch.zeros(weight.numel(), dtype=torch.bool, device=weight.device)
        mask[order[:keep]] = True
        mask = mask.view_as(weight)
    return mask


def two_of_four_mask(weight: torch.Tensor) -> torch.Tensor:
    """True for the 2 largest-magnitude of every 4 consecutive weights along each row (ties: the first)."""
    groups = weight.abs().reshape(-1, 4)  # (rows * columns / 4, 4)
    keep = groups.argsort(dim=1, descending=True, stable=True)[:, :2]  # (groups, 2)
    return torch.zeros(groups.shape, dtype=torch.bool, device=weight.device).scatter_(1, keep, True).view_as(weight)


def gradual_density(fraction: float, density: float, start: float, end: float) -> float:
    """Zhu & Gupta's cubic schedule: 1 before start, `density` after end."""
    s = min(max((fraction - start) / (end - start), 0.0), 1.0)
    return density + (1 - density) * (1 - s) ** 3


class Sparsity(Callback):
    def __init__(self, method: str, density: float, start: float, end: float, update_every: int, seed: int,
                 ticket: Path | None = None, rewind: Path | None = None):
        self.method, self.density, self.start, self.end = method, density, start, end
        self.update_every, self.seed = update_every, seed
        self.ticket, self.rewind = ticket, rewind  # lottery: checkpoints of the dense run
        self.masks: dict[str, torch.Tensor] = {}
        self.current_density = 1.0

    def on_train_start(self, state: TrainState) -> None:
        """The initial masks of rigl and lottery (a resumed run has its masks from the checkpoint)."""
        matrices = sparse_matrices(state.model)
        if not self.masks and self.method == "rigl":  # random masks at the target density
            generator = torch.Generator().manual_seed(self.seed)
            for name, weight in matrices.items():
                scores = torch.rand(weight.shape, generator=generator).to(weight.device)
                self.masks[name] = magnitude_mask(scores, self.density)
            self.current_density = self.density
        if not self.masks and self.method == "lottery":
            final = read_weights(self.ticket)
            self.masks = {name: magnitude_mask(final[name], self.density) for name in matrices}
            if self.rewind is not None:
                load_weights(state.model, read_weights(self.rewind), self.rewind)
            log.info("sparsity: lottery ticket of %s at density %.3f, rewound to %s", self.ticket, self.density,
                     self.rewind or "the initialization")
            self.current_density = self.density
        self.masks = {name: mask.to(matrices[name].device) for name, mask in self.masks.items()}
        self._apply(state)

    def before_optimizer_step(self, state: TrainState) -> None:
        step = state.progress.step + 1
        if self.method == "rigl" and state.fraction < self.end and step % self.update_every == 0:
            if torch.isfinite(state.grad_norm):  # an fp16 overflow the scaler will skip: no rewiring on it
                self._drop_and_grow(state)

    def after_optimizer_step(self, state: TrainState) -> None:
        self._apply(state)
        if self.method == "semi-structured-2:4" and not self.masks and state.fraction >= self.start:
            self.masks = {name: two_of_four_mask(weight.detach()) for name, weight in sparse_matrices(state.model).items()}
            self.current_density = 0.5
            log.info("sparsity: pruned to 2:4 at step %d", state.progress.step + 1)
            self._apply(state)
        if self.method == "magnitude":  # pruned from the masked weights: what was pruned stays pruned
            target = gradual_density(state.fraction, self.density, self.start, self.end)
            if self.current_density - target >= 0.01 or (target == self.density != self.current_density):
                for name, weight in sparse_matrices(state.model).items():
                    self.masks[name] = magnitude_mask(weight.detach(), target)
                self.current_density = target
                log.info("sparsity: density %.3f at step %d", target, state.progress.step + 1)
                self._apply(state)

    def on_train_end(self, state: TrainState, reason: str) -> None:
        log.info("sparsity: %s, density %.3f; sparse_flops_fraction %.3f of the layers' matmul FLOPs "
                 "(dense kernels ran them all)", self.method, self.current_density, self.current_density)

    @torch.no_grad()
    def _apply(self, state: TrainState) -> None:
        for name, weight in sparse_matrices(state.model).items():
            if name in self.masks:
                weight.mul_(self.masks[name])

    @torch.no_grad()
    def _drop_and_grow(self, state: TrainState) -> None:
        share = RIGL_DROP_FRACTION * (1 + math.cos(math.pi * state.fraction / self.end)) / 2
        for name, weight in sparse_matrices(state.model).items():
            mask, gradient = self.masks[name], weight.grad
            if gradient is None:
                continue
            count = min(int(share * mask.sum()), int((~mask).sum()))  # no more than can grow
            if count == 0:
                continue
            active_magnitude = torch.where(mask, weight.abs(), torch.inf).flatten()
            dropped = active_magnitude.topk(count, largest=False).indices
            inactive_gradient = torch.where(mask, -torch.inf, gradient.abs()).flatten()
            grown = inactive_gradient.topk(count).indices
            flat = mask.flatten().clone()
            flat[dropped] = False
            flat[grown] = True
            self.masks[name] = flat.view_as(mask)
            weight.view(-1)[grown] = 0.0  # regrown weights start at zero

    def state_dict(self) -> dict:
        return {"masks": {name: mask.cpu() for name, mask in self.masks.items()},
                "current_density": self.current_density}

    def load_state_dict(self, state: dict) -> None:
        self.masks, self.current_density = dict(state["masks"]), state["current_density"]
