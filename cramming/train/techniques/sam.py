"""Sharpness-aware minimization (Foret et al., 2021, "Sharpness-Aware Minimization for Efficiently
Improving Generalization") around whichever optimizer runs: `train.optim.sam_rho=<rho>`.

Each step takes its gradient g at the weights w as usual, moves to w + rho * g / |g| (the steepest point
nearby, to first order), takes the gradient there on the same microbatches, returns to w, and lets the
optimizer update w with that second gradient. So a step costs two forward and backward passes: the budget
clock sees both, and tokens/s halves; a copy of the weights is kept meanwhile. The loss recorded is the first pass's (at w). Under accumulation the
perturbation uses the step's whole gradient (averaged across ranks); under a loss scaler the norm of the
unscaled one. It keeps no state of its own: a resumed run continues exactly.
"""

import math

import torch

from cramming.errors import require
from cramming.gradient_step import Gradients, StepState, StepWrapper
from cramming.plugin_keys import Setting
from cramming.train.techniques.base import RunContext, Technique, parameter_bytes


class SharpnessAware(Technique):
    label = "train.optim.sam_rho"
    switch = "train.optim.sam_rho"
    settings = (Setting("train.optim.sam_rho", float, 0.0),)
    variant, variant_overrides = "sam", ("train.optim.sam_rho=0.05",)

    def __init__(self, rho: float):
        self.rho = rho

    @staticmethod
    def check(cfg) -> None:
        rho = cfg.train.optim.sam_rho
        require([(math.isfinite(rho) and rho >= 0, f"train.optim.sam_rho={rho} must not be negative (0: off)")])

    @classmethod
    def build(cls, cfg, run: RunContext) -> "SharpnessAware":
        return cls(cfg.train.optim.sam_rho)

    def wrap_step(self, step):
        return SharpnessAwareStep(step, self.rho)

    def extra_memory(self, model: torch.nn.Module) -> int:
        return parameter_bytes(model)  # the copy of the weights it returns to


class SharpnessAwareStep(StepWrapper):
    """The step it wraps takes the gradient at w (keeping its microbatches); this step moves to the steepest
    point nearby, takes the gradient there on the same microbatches through the same step, and returns to w."""

    def __init__(self, inner, rho: float):
        super().__init__(inner)
        self.rho = rho

    def gradients(self, state: StepState, keep_batches: bool = False) -> Gradients:
        first = self.inner.gradients(state, keep_batches=True)
        parameters, originals = self._ascend(state.model)
        state.model.zero_grad(set_to_none=True)
        perturbed_loss = torch.zeros((), device=state.device)
        for index, batch in enumerate(first.batches):
            perturbed_loss += self.inner.backward(state, batch, last=index + 1 == state.accumulate)
        if first.microbatches < state.accumulate:
            self.inner.rescale(state, first.microbatches)
        if parameters:
            with torch.no_grad():
                torch._foreach_copy_(parameters, originals)  # back to w exactly
        # A non-finite loss at the perturbed weights (on any rank) must skip the update too (the step checks
        # the step's loss, which every rank shares).
        perturbed_loss = self._mean(perturbed_loss)
        loss = torch.where(torch.isfinite(perturbed_loss), first.loss, perturbed_loss)
        return Gradients(loss, first.microbatches, first.batches if keep_batches else [])

    @torch.no_grad()
    def _ascend(self, model: torch.nn.Module) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Move each parameter by rho * g / |g| (g: the step's unscaled gradient); the parameters moved and
        copies of their values before. A non-finite |g| (an fp16 overflow) moves nothing."""
        parameters = [p for p in model.parameters() if p.grad is not None]
        if not parameters:
            return [], []
        scale = self.scaler.get_scale() if self.scaler.is_enabled() else 1.0
        norm = torch.nn.utils.get_total_norm([p.grad for p in parameters]) / scale
        factor = torch.where(torch.isfinite(norm), self.rho / (norm + 1e-12) / scale, 0.0)
        originals = [p.detach().clone() for p in parameters]
        torch._foreach_add_(parameters, [(p.grad * factor).to(p.dtype) for p in parameters])
        return parameters, originals
