"""Sophia (Liu et al., 2023, "Sophia: A Scalable Stochastic Second-order Optimizer for Language Model
Pre-training"), its Gauss-Newton-Bartlett variant SophiaG: `train.optim.name=sophia`.

The optimizer (the update rule, its state m and h) is cramming.train.optimizers.SophiaG; this is the
technique that feeds it. Every `hessian_every` steps, labels are sampled from the model's own predictions at
the masked positions, and the squared gradient of the loss on those labels (times the tokens predicted)
estimates the Gauss-Newton diagonal, which h takes in. That gradient comes from the same forward pass as the
step's (one extra backward pass through it, no second forward and no second-order autograd, so the fused
attention kernels stay usable).

The callback makes the estimate at `after_forward` (it needs the logits) and hands it over at
`before_optimizer_step`; it checks the optimizer's own two keys (gamma, hessian_every).
"""

import torch
import torch.nn.functional as F

from cramming.data.mlm import IGNORE_INDEX, labels_at_logits
from cramming.errors import CrammingError, require
from cramming.train.callbacks import TrainState
from cramming.train.techniques.base import RunContext, Technique, parameter_bytes


class SophiaHessian(Technique):
    """Every `every` steps, the Gauss-Newton-Bartlett estimate of the Hessian diagonal for SophiaG, on with
    its optimizer (`train.optim.name=sophia`, its defaults in configs/optim/sophia.yaml); it checks the
    optimizer's own two hyperparameters (gamma, hessian_every: cramming.train.optimizers)."""

    name, override = "sophia-hessian", "train.optim.name=sophia"
    switch, switch_value = "train.optim.name", "sophia"

    def __init__(self, every: int, seed: int):
        self.every, self.seed = every, seed
        self.estimates: dict[torch.Tensor, torch.Tensor] = {}  # parameter -> sampled-label gradient, summed
        self.tokens = 0

    @classmethod
    def check(cls, cfg) -> None:
        optim = cfg.train.optim
        require([(optim.gamma is None or optim.gamma > 0, f"train.optim.gamma={optim.gamma} must be positive"),
                 (optim.hessian_every is None or optim.hessian_every >= 1,
                  f"train.optim.hessian_every={optim.hessian_every} must be at least 1")])

    @classmethod
    def build(cls, cfg, run: RunContext) -> "SophiaHessian":
        if run.world_size > 1 or run.compile:
            raise CrammingError("train.optim.name=sophia estimates its Hessian with a second backward pass through "
                                "the step's graph, tested only eagerly on one process: add impl.compile=false and "
                                "run it on one GPU")
        return cls(cfg.train.optim.hessian_every, cfg.train.seed)

    def extra_memory(self, model: torch.nn.Module) -> int:
        return parameter_bytes(model)  # the summed sampled-label gradients between estimates

    def _due(self, state: TrainState) -> bool:
        return state.progress.step % self.every == 0

    def after_forward(self, state: TrainState, batch: dict, loss: torch.Tensor, output) -> torch.Tensor:
        if not self._due(state):
            return loss
        logits = output.logits  # (B, k, V) on the sparse-prediction path, else (B, T, V)
        labels = labels_at_logits(batch, logits)  # (B, k or T)
        predicted = labels != IGNORE_INDEX
        seed = self.seed * 1_000_003 + state.progress.microbatches
        generator = torch.Generator(device=logits.device).manual_seed(seed)
        probabilities = logits.detach().float().softmax(-1).flatten(0, 1)  # (B * k, V)
        sampled = torch.multinomial(probabilities, 1, generator=generator).view(labels.shape)  # (B, k)
        sampled = torch.where(predicted, sampled, IGNORE_INDEX)
        sampled_loss = F.cross_entropy(logits.flatten(0, 1).float(), sampled.flatten(), ignore_index=IGNORE_INDEX)
        parameters = [p for p in state.model.parameters() if p.requires_grad]
        gradients = torch.autograd.grad(sampled_loss / state.accumulate, parameters, retain_graph=True,
                                        allow_unused=True)
        for parameter, gradient in zip(parameters, gradients):
            if gradient is not None:
                self.estimates[parameter] = self.estimates.get(parameter, 0) + gradient
        self.tokens += int(predicted.sum())
        return loss

    def before_optimizer_step(self, state: TrainState) -> None:
        if self.estimates:
            state.optimizer.update_hessian(self.estimates, self.tokens)
            self.estimates, self.tokens = {}, 0
