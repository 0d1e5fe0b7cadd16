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
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import torch

from cramming.errors import CrammingError, require
from cramming.model.checkpoint import load_weights, read_weights
from cramming.model.config import as_model_config
from cramming.model.crammed_bert import encoder_matrices
from cramming.plugins import Setting
from cramming.train.callbacks import TrainState
from cramming.train.runs import CONFIG_FILE, FINAL, resolve_checkpoint, run_config
from cramming.train.techniques.base import RunContext, Technique

log = logging.getLogger("pretrain")
RIGL_DROP_FRACTION = 0.3
METHODS = ("magnitude", "rigl", "semi-structured-2:4", "lottery")


@dataclass
class SparsityConfig:
    """`train.sparsity`: sparse weight matrices in the encoder's layers; off at method null."""

    # magnitude (gradual pruning) | rigl (dynamic sparse training) | semi-structured-2:4 (2 of every 4, one
    # shot at `start`; NVIDIA Ampere or later) | lottery (a finished dense run's ticket, rewound)
    method: Optional[str] = None
    density: float = 0.5  # the fraction of each matrix's weights kept (2:4: exactly 0.5)
    start: float = 0.1  # magnitude: progress at which pruning starts; semi-structured-2:4: the one pruning
    end: float = 0.8  # magnitude: progress at which the density is reached; rigl: its last mask update
    update_every: int = 100  # rigl: optimizer steps between mask updates
    ticket: Optional[str] = None  # lottery: the dense run (or its directory of runs) whose final weights pick the mask
    # lottery: the progress fraction of the ticket run's kept checkpoint (checkpoint.keep_at) the surviving
    # weights rewind to; null: the initialization, which the same train.seed and arch rebuild
    rewind: Optional[float] = None


def supports_semi_structured(device: torch.device) -> bool:
    """torch.sparse's 2:4 kernels: CUDA devices of compute capability 8.0 or later."""
    return device.type == "cuda" and torch.cuda.get_device_capability(device) >= (8, 0)


def device_name(device: torch.device) -> str:
    if device.type != "cuda":
        return device.type
    major, minor = torch.cuda.get_device_capability(device)
    return f"{torch.cuda.get_device_name(device)} (compute capability {major}.{minor})"


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


class Sparsity(Technique):
    name, override = "sparsity", "train.sparsity"
    switch = "train.sparsity.method"
    settings = (Setting("train.sparsity", SparsityConfig),)
    conflicts = {"stacking": "do not combine: a grown layer would keep its own mask, not its source's",
                 "sam": "do not combine: SAM's move would reach the pruned weights"}

    @staticmethod
    def speed_notice(cfg, device: torch.device) -> str | None:
        if cfg.train.sparsity.method != "semi-structured-2:4":
            return None
        return ("train.sparsity.method=semi-structured-2:4 is a sparsity ablation, not a speed-up: training masks the "
                "weights and keeps dense kernels, and on an H100 (torch 2.11) torch.sparse's 2:4 FFN matmuls ran at "
                "0.13x and 0.09x the dense ones (scripts/bench_sparse.py)")

    def __init__(self, method: str, density: float, start: float, end: float, update_every: int, seed: int,
                 ticket: Path | None = None, rewind: Path | None = None):
        self.method, self.density, self.start, self.end = method, density, start, end
        self.update_every, self.seed = update_every, seed
        self.ticket, self.rewind = ticket, rewind  # lottery: checkpoints of the dense run
        self.masks: dict[str, torch.Tensor] = {}
        self.current_density = 1.0

    @classmethod
    def check(cls, cfg) -> None:
        sparsity = cfg.train.sparsity
        require([
            (sparsity.method is None or sparsity.method in METHODS,
             f"train.sparsity.method={sparsity.method!r} must be one of {', '.join(METHODS)} (null: off)"),
            (0 < sparsity.density < 1, f"train.sparsity.density={sparsity.density} must be in (0, 1)"),
            (sparsity.method != "semi-structured-2:4" or sparsity.density == 0.5,
             f"train.sparsity.method=semi-structured-2:4 keeps 2 of every 4 weights: train.sparsity.density="
             f"{sparsity.density} must stay 0.5"),
            ((sparsity.method == "lottery") == (sparsity.ticket is not None),
             "train.sparsity.method=lottery needs train.sparsity.ticket=<the dense run>, and a ticket is read only "
             "by method=lottery"),
            (sparsity.rewind is None or (sparsity.method == "lottery" and 0 <= sparsity.rewind < 1),
             f"train.sparsity.rewind={sparsity.rewind} is a progress fraction in [0, 1), read only by method=lottery"),
            (0 <= sparsity.start < sparsity.end <= 1,
             f"train.sparsity.start={sparsity.start} and .end={sparsity.end} must satisfy 0 <= start < end <= 1"),
            (sparsity.update_every >= 1, f"train.sparsity.update_every={sparsity.update_every} must be at least 1"),
        ])

    @staticmethod
    def check_inputs(cfg) -> None:
        """method=lottery: the dense run's config against this one (lottery_ticket)."""
        if cfg.train.sparsity.method == "lottery":
            lottery_ticket(cfg)

    @classmethod
    def build(cls, cfg, run: RunContext) -> "Sparsity":
        sparsity = cfg.train.sparsity
        if sparsity.method == "semi-structured-2:4" and not supports_semi_structured(run.device):
            raise CrammingError(f"train.sparsity.method=semi-structured-2:4 needs an NVIDIA GPU of compute capability "
                                f"8.0 or later (Ampere, Ada, Hopper), whose sparse tensor cores run the 2:4 pattern; "
                                f"this run is on {device_name(run.device)}. On it, magnitude pruning to "
                                "train.sparsity.density=0.5 gives the same sparsity without the pattern")
        ticket, rewind = lottery_ticket(cfg) if sparsity.method == "lottery" else (None, None)
        return cls(sparsity.method, sparsity.density, sparsity.start, sparsity.end, sparsity.update_every,
                   cfg.train.seed, ticket, rewind)

    def extra_memory(self, model: torch.nn.Module) -> int:
        return sum(weight.numel() for weight in encoder_matrices(model).values())  # one bool mask per weight

    def on_train_start(self, state: TrainState) -> None:
        """The initial masks of rigl and lottery (a resumed run has its masks from the checkpoint)."""
        matrices = encoder_matrices(state.model)
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
            self.masks = {name: two_of_four_mask(weight.detach())
                          for name, weight in encoder_matrices(state.model).items()}
            self.current_density = 0.5
            log.info("sparsity: pruned to 2:4 at step %d", state.progress.step + 1)
            self._apply(state)
        if self.method == "magnitude":  # pruned from the masked weights: what was pruned stays pruned
            target = gradual_density(state.fraction, self.density, self.start, self.end)
            if self.current_density - target >= 0.01 or (target == self.density != self.current_density):
                for name, weight in encoder_matrices(state.model).items():
                    self.masks[name] = magnitude_mask(weight.detach(), target)
                self.current_density = target
                log.info("sparsity: density %.3f at step %d", target, state.progress.step + 1)
                self._apply(state)

    def on_train_end(self, state: TrainState, reason: str) -> None:
        log.info("sparsity: %s, density %.3f; sparse_flops_fraction %.3f of the layers' matmul FLOPs "
                 "(dense kernels ran them all)", self.method, self.current_density, self.current_density)

    @torch.no_grad()
    def _apply(self, state: TrainState) -> None:
        for name, weight in encoder_matrices(state.model).items():
            if name in self.masks:
                weight.mul_(self.masks[name])

    @torch.no_grad()
    def _drop_and_grow(self, state: TrainState) -> None:
        share = RIGL_DROP_FRACTION * (1 + math.cos(math.pi * state.fraction / self.end)) / 2
        for name, weight in encoder_matrices(state.model).items():
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


def lottery_ticket(cfg) -> tuple[Path, Path | None]:
    """The dense run's final checkpoint (the mask) and the checkpoint to rewind to (None: the initialization,
    which the dense run's seed and arch rebuild: both must be this run's)."""
    sparsity = cfg.train.sparsity
    final = resolve_checkpoint(sparsity.ticket, Path(cfg.output_dir) / cfg.name, key="train.sparsity.ticket")
    run_dir = final.parent.parent
    if final.name != FINAL or not (run_dir / CONFIG_FILE).is_file():
        raise CrammingError(f"train.sparsity.ticket={sparsity.ticket}: {final} is not the final checkpoint of a "
                            "finished run (the ticket is the dense run's trained weights)")
    dense = run_config(run_dir)
    # as models (a key added since the dense run holds its default there), not as the raw config.yaml dicts
    if as_model_config(dense.arch) != as_model_config(cfg.arch):
        raise CrammingError(f"train.sparsity.ticket={sparsity.ticket}: that run's arch differs from this one's: "
                            "the ticket must be drawn from the same architecture")
    if dense.data.tokenizer.vocab_size != cfg.data.tokenizer.vocab_size:
        raise CrammingError(f"train.sparsity.ticket={sparsity.ticket}: that run's data.tokenizer.vocab_size="
                            f"{dense.data.tokenizer.vocab_size} differs from this one's "
                            f"({cfg.data.tokenizer.vocab_size}), so its embedding has another shape: the ticket must "
                            "be drawn from the same vocabulary")
    if sparsity.rewind is None:
        if dense.train.seed != cfg.train.seed:
            raise CrammingError(f"train.sparsity.ticket={sparsity.ticket}: that run's train.seed={dense.train.seed} "
                                f"differs from this one's ({cfg.train.seed}), so this run's initialization is not "
                                "the ticket's: use the same seed, or rewind to a kept checkpoint")
        return final, None
    kept = sorted((run_dir / "checkpoints").glob(f"at-{sparsity.rewind:g}-step-*"))
    if not kept:
        raise CrammingError(f"train.sparsity.rewind={sparsity.rewind}: {run_dir} kept no checkpoint at that "
                            f"progress; train the dense run with checkpoint.keep_at=[{sparsity.rewind:g}]")
    return final, kept[-1]
