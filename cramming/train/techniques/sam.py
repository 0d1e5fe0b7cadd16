"""Sharpness-aware minimization (Foret et al., 2021, "Sharpness-Aware Minimization for Efficiently
Improving Generalization") around whichever optimizer runs: `train.optim.sam_rho=<rho>`.

Each step takes its gradient g at the weights w as usual, moves to w + rho * g / |g| (the steepest point
nearby, to first order), takes the gradient there on the same microbatches, returns to w, and lets the
optimizer update w with that second gradient. So a step costs two forward and backward passes: the budget
clock sees both, and tokens/s halves; a copy of the weights is kept meanwhile. The loss recorded is the first
pass's (at w). It acts at the step's `after_gradients` point. Under accumulation the perturbation uses the step's
whole gradient (averaged across ranks); under a loss scaler the norm of the unscaled one. It keeps no state of its
own: a resumed run continues exactly.
"""

import math

import torch

from cramming.engine.step import Step, StepState
from cramming.errors import require
from cramming.plugins import Setting
from cramming.train.techniques.base import RunContext, Technique, parameter_bytes


class SharpnessAware(Technique):
    name, override = "sam", "train.optim.sam_rho"
    switch = "train.optim.sam_rho"
    settings = (Setting("train.optim.sam_rho", float, 0.0),)
    variant_overrides = ("train.optim.sam_rho=0.05",)
    keeps_batches = True  # the second pass runs the step's microbatches again

    def __init__(self, rho: float):
        self.rho = rho

    @classmethod
    def check(cls, cfg) -> None:
        rho = cfg.train.optim.sam_rho
        require([(math.isfinite(rho) and rho >= 0, f"train.optim.sam_rho={rho} must not be negative (0: off)")])

    @classmethod
    def build(cls, cfg, run: RunContext) -> "SharpnessAware":
        return cls(cfg.train.optim.sam_rho)

    def extra_memory(self, model: torch.nn.Module) -> int:
        return parameter_bytes(model)  # the copy of the weights it returns to

    def after_gradients(self, step: Step, state: StepState, batches: list[dict], loss: torch.Tensor) -> torch.Tensor:
        """The step took the gradient at w (keeping its microbatches): move to the steepest point nearby, take the
        gradient there on the same microbatches through the same step, and return to w."""
        parameters, originals = self._ascend(state.model, step.scaler)
        state.model.zero_grad(set_to_none=True)
        perturbed_loss = torch.zeros((), device=state.device)
        for index, batch in enumerate(batches):
            perturbed_loss += step.backward(state, batch, last=index + 1 == state.accumulate)
        if len(batches) < state.accumulate:
            step.rescale(state, len(batches))
        if parameters:
            with torch.no_grad():
                torch._foreach_copy_(parameters, originals)  # back to w exactly
        # A non-finite loss at the perturbed weights (on any rank) must skip the update too (the step checks
        # the step's loss, which every rank shares).
        perturbed_loss = step.mean(perturbed_loss)
        return torch.where(torch.isfinite(perturbed_loss), loss, perturbed_loss)

    @torch.no_grad()
    def _ascend(self, model: torch.nn.Module,
                scaler: torch.amp.GradScaler) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Move each parameter by rho * g / |g| (g: the step's unscaled gradient); the parameters moved and
        copies of their values before. A non-finite |g| (an fp16 overflow) moves nothing."""
        parameters = [p for p in model.parameters() if p.grad is not None]
        if not parameters:
            return [], []
        scale = scaler.get_scale() if scaler.is_enabled() else 1.0
        norm = torch.nn.utils.get_total_norm([p.grad for p in parameters]) / scale
        factor = torch.where(torch.isfinite(norm), self.rho / (norm + 1e-12) / scale, 0.0)
        originals = [p.detach().clone() for p in parameters]
        torch._foreach_add_(parameters, [(p.grad * factor).to(p.dtype) for p in parameters])
        return parameters, originals
