"""Sophia (Liu et al., 2023, "Sophia: A Scalable Stochastic Second-order Optimizer for Language Model
Pre-training"), its Gauss-Newton-Bartlett variant SophiaG: `train.optim.name=sophia`.

The update is a momentum m divided by a diagonal Hessian estimate h, clipped per coordinate:
w -= lr * sign(m) * min(|m| / (gamma * tokens * h), 1), with decoupled weight decay. Every
`hessian_every` steps h takes in a fresh estimate: labels are sampled from the model's own predictions at
the masked positions, and the squared gradient of the loss on those labels (times the tokens predicted)
estimates the Gauss-Newton diagonal. That gradient comes from the same forward pass as the step's (one
extra backward pass through it, no second forward and no second-order autograd, so the fused attention
kernels stay usable). pytorch-optimizer has only SophiaH (Hutchinson), which needs a backward pass
through the backward pass; this is written here.

Two parts: the optimizer (the update rule, state m and h) and the callback that makes the estimate at
`after_forward` (it needs the logits) and hands it over at `before_optimizer_step`.
"""

from typing import Optional

import torch
import torch.nn.functional as F

from cramming.data.mlm import IGNORE_INDEX, labels_at_logits
from cramming.errors import CrammingError, require
from cramming.train.callbacks import TrainState
from cramming.train.optimizers import Optimizer, optimizer_groups
from cramming.train.techniques.base import RunContext, Setting, Technique, parameter_bytes


class SophiaG(torch.optim.Optimizer):
    """The update rule; `update_hessian` takes in an estimate (from SophiaHessian)."""

    def __init__(self, params, lr: float, betas: tuple[float, float], gamma: float, weight_decay: float):
        super().__init__(params, dict(lr=lr, betas=tuple(betas), gamma=gamma, weight_decay=weight_decay))

    @torch.no_grad()
    def update_hessian(self, estimates: dict[torch.Tensor, torch.Tensor], tokens: int) -> None:
        """h <- beta2 h + (1 - beta2) * tokens * g_hat^2 for each parameter with an estimate g_hat."""
        for group in self.param_groups:
            beta2 = group["betas"][1]
            for parameter in group["params"]:
                if parameter in estimates:
                    hessian = self._state(parameter)["hessian"]
                    hessian.mul_(beta2).addcmul_(estimates[parameter], estimates[parameter], value=(1 - beta2) * tokens)

    def _state(self, parameter: torch.Tensor) -> dict:
        state = self.state[parameter]
        if not state:
            state["momentum"] = torch.zeros_like(parameter)
            state["hessian"] = torch.zeros_like(parameter)
        return state

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            beta1 = group["betas"][0]
            for parameter in group["params"]:
                if parameter.grad is None:
                    continue
                state = self._state(parameter)
                parameter.mul_(1 - group["lr"] * group["weight_decay"])
                state["momentum"].mul_(beta1).add_(parameter.grad, alpha=1 - beta1)
                # gamma * h with tokens folded into h at update_hessian; 1e-15 keeps an empty h finite
                ratio = (state["momentum"].abs() / (group["gamma"] * state["hessian"] + 1e-15)).clamp_(max=1.0)
                parameter.addcmul_(state["momentum"].sign(), ratio, value=-group["lr"])


def build_sophia(model: torch.nn.Module, optim) -> SophiaG:
    return SophiaG(optimizer_groups(model, optim), lr=optim.lr, betas=tuple(optim.betas), gamma=optim.gamma,
                   weight_decay=optim.weight_decay)


class SophiaHessian(Technique):
    """Every `every` steps, the Gauss-Newton-Bartlett estimate of the Hessian diagonal for SophiaG. It brings
    the optimizer (`train.optim.name=sophia`, its defaults in configs/optim/sophia.yaml) and its two
    hyperparameters beside the common ones."""

    label = "train.optim.name=sophia"
    settings = (Setting("train.optim.gamma", Optional[float]),  # the scale of its Hessian-clipped update
                Setting("train.optim.hessian_every", Optional[int]))  # steps between Hessian estimates
    optimizers = {"sophia": Optimizer(("lr", "betas", "weight_decay", "gamma", "hessian_every"), build_sophia)}

    def __init__(self, every: int, seed: int):
        self.every, self.seed = every, seed
        self.estimates: dict[torch.Tensor, torch.Tensor] = {}  # parameter -> sampled-label gradient, summed
        self.tokens = 0

    @staticmethod
    def enabled(cfg) -> bool:
        return cfg.train.optim.name == "sophia"

    @staticmethod
    def check(cfg) -> None:
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
        generator = torch.Generator(device=logits.device).manual_seed(self.seed * 1_000_003 + state.progress.microbatches)
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
