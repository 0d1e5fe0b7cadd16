"""SophiaG (Liu et al., 2023, "Sophia: A Scalable Stochastic Second-order Optimizer for Language Model
Pre-training"): `optim=sophia`. Its update rule is written here; its Hessian estimates come from the technique
cramming.train.techniques.sophia_hessian, which switches on with it. pytorch-optimizer has only SophiaH
(Hutchinson), which needs a backward pass through the backward pass."""

from typing import Optional

import torch

from cramming.plugin_keys import Setting
from cramming.train.optimizers.base import Optimizer, optimizer_groups


class SophiaG(torch.optim.Optimizer):
    """The update rule: a momentum m divided by a diagonal Hessian estimate h, clipped per coordinate,
    w -= lr * sign(m) * min(|m| / (gamma * tokens * h), 1), with decoupled weight decay. h takes in the
    Gauss-Newton-Bartlett estimates the technique makes every `hessian_every` steps (`update_hessian`)."""

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


class Sophia(Optimizer):
    name = "sophia"
    keys = ("lr", "betas", "weight_decay", "gamma", "hessian_every")
    settings = (
        Setting("train.optim.gamma", Optional[float]),  # its update's scale
        Setting("train.optim.hessian_every", Optional[int]),  # optimizer steps between Hessian estimates
    )
    # not offloadable: the offload wrapper would have to pass the Hessian estimates on

    @staticmethod
    def build(model, optim) -> SophiaG:
        return SophiaG(optimizer_groups(model, optim), lr=optim.lr, betas=tuple(optim.betas), gamma=optim.gamma,
                       weight_decay=optim.weight_decay)
