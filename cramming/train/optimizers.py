"""The pretraining optimizer: the config group `optim` (`optim=lion`, or `train.optim.name=lion`) composes
`configs/optim/<name>.yaml`, its name and its defaults, into `train.optim`; OPTIMIZERS holds every choice.

A hyperparameter the optimizer does not use is an error rather than silently ignored (OptimConfig.check).
Weight decay falls on matrices only for all of them (cramming.adamw.parameter_groups). Implementations come
from torch.optim where it has them and from pytorch-optimizer (LAMB, Lion, Muon with its AdamW groups)
otherwise, and torchao's AdamW8bit (CUDA only); SophiaG is written here (its Hessian estimates come from the technique
cramming.train.techniques.sophia_hessian). `Optimizer` says what an entry declares; docs/ablations.md what each
does. Adding one: its builder and one entry in OPTIMIZERS here (with its `own_keys`, if it reads a
hyperparameter no other optimizer does), and configs/optim/<name>.yaml.
"""

from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch import nn

from cramming.adamw import build_optimizer, parameter_groups
from cramming.errors import CrammingError
from cramming.model.crammed_bert import encoder_matrices


@dataclass(frozen=True)
class Optimizer:
    keys: tuple[str, ...]  # the hyperparameters it reads, all in configs/optim/<name>.yaml
    build: Callable[[nn.Module, Any], torch.optim.Optimizer]  # (model, resolved train.optim)
    cuda_only: str | None = None  # what needs CUDA, for the error elsewhere (None: runs anywhere)
    speed_notice: str | None = None  # on a GPU: where it is measured slower than the default
    uses_torchao_kernels: bool = False  # on a GPU, its speed depends on torchao's compiled kernels
    state_bytes_per_parameter: float = 8  # at most, in a checkpoint (AdamW: two fp32 moments); for disk estimates
    # impl.offload_optimizer may hold it (torchao's CPUOffloadOptimizer): its update reads only the parameter, its
    # gradient and its own state
    offloadable: bool = False
    # hyperparameters no other optimizer reads, (name, type): train.optim gains them (null unless it is chosen)
    own_keys: tuple[tuple[str, type], ...] = ()

    def check_on_device(self, name: str, device: torch.device) -> None:
        if self.cuda_only and device.type != "cuda":
            raise CrammingError(f"train.optim.name={name} ({self.cuda_only}) needs a CUDA GPU; this run is on "
                                f"{device.type}: use train.optim.name=adamw")


def optimizer_groups(model, optim) -> list[dict]:
    """The parameter groups every optimizer here takes: weight decay on matrices only."""
    return parameter_groups(model, optim.weight_decay, optim.decay_embeddings)


def _adamw(model, optim):
    return build_optimizer(model, lr=optim.lr, betas=optim.betas, eps=optim.eps, weight_decay=optim.weight_decay,
                           decay_embeddings=optim.decay_embeddings)


def _lamb(model, optim):
    from pytorch_optimizer import Lamb

    return Lamb(optimizer_groups(model, optim), lr=optim.lr, betas=tuple(optim.betas), eps=optim.eps)


def _lion(model, optim):
    from pytorch_optimizer import Lion

    return Lion(optimizer_groups(model, optim), lr=optim.lr, betas=tuple(optim.betas))


def _sgd_nesterov(model, optim):
    return torch.optim.SGD(optimizer_groups(model, optim), lr=optim.lr, momentum=optim.momentum, nesterov=True)


def _adafactor(model, optim):
    return torch.optim.Adafactor(optimizer_groups(model, optim), lr=optim.lr)


def _muon(model, optim):
    """Muon for the 2-D matrices inside the encoder's layers; AdamW groups for everything else."""
    from pytorch_optimizer import Muon

    hidden = {id(p) for p in encoder_matrices(model).values()}
    groups = []
    for group in optimizer_groups(model, optim):
        for use_muon in (True, False):
            params = [p for p in group["params"] if (id(p) in hidden) == use_muon]
            if params:
                groups.append({**group, "params": params, "use_muon": use_muon})
    return Muon(groups, lr=optim.lr, momentum=optim.momentum, use_adjusted_lr=True, adamw_lr=optim.lr,
                adamw_betas=tuple(optim.betas), adamw_eps=optim.eps)


def _adamw8bit(model, optim):
    """torchao's AdamW with block-wise 8-bit moments (Dettmers et al. 2022): 2 bytes of state per parameter
    instead of 8. Matrices of 4096 or more values (a multiple of the 256-value block) get 8-bit states, the rest
    fp32. Its learning rate is a tensor in each group (cramming.schedules.set_lr fills it in place)."""
    from torchao.optim import AdamW8bit

    return AdamW8bit(optimizer_groups(model, optim), lr=optim.lr, betas=tuple(optim.betas), eps=optim.eps,
                     weight_decay=optim.weight_decay)


class SophiaG(torch.optim.Optimizer):
    """SophiaG (Liu et al., 2023, "Sophia: A Scalable Stochastic Second-order Optimizer for Language Model
    Pre-training"), the update rule of `train.optim.name=sophia`: a momentum m divided by a diagonal Hessian
    estimate h, clipped per coordinate, w -= lr * sign(m) * min(|m| / (gamma * tokens * h), 1), with decoupled
    weight decay. h takes in the Gauss-Newton-Bartlett estimates the technique
    cramming.train.techniques.sophia_hessian makes every `hessian_every` steps (`update_hessian`).
    pytorch-optimizer has only SophiaH (Hutchinson), which needs a backward pass through the backward pass."""

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


def _sophia(model: torch.nn.Module, optim) -> SophiaG:
    return SophiaG(optimizer_groups(model, optim), lr=optim.lr, betas=tuple(optim.betas), gamma=optim.gamma,
                   weight_decay=optim.weight_decay)


OPTIMIZERS: dict[str, Optimizer] = {
    "adamw": Optimizer(("lr", "betas", "eps", "weight_decay"), _adamw, offloadable=True),
    "lamb": Optimizer(("lr", "betas", "eps", "weight_decay"), _lamb, offloadable=True),
    "lion": Optimizer(("lr", "betas", "weight_decay"), _lion, state_bytes_per_parameter=4, offloadable=True),
    "sgd-nesterov": Optimizer(("lr", "momentum", "weight_decay"), _sgd_nesterov, state_bytes_per_parameter=4,
                              offloadable=True),
    "adafactor": Optimizer(("lr", "weight_decay"), _adafactor, offloadable=True),
    "muon": Optimizer(("lr", "momentum", "betas", "eps", "weight_decay"), _muon, offloadable=True),
    "adamw8bit": Optimizer(  # not offloadable: its states would sit on the CPU
        ("lr", "betas", "eps", "weight_decay"), _adamw8bit, cuda_only="torchao's 8-bit AdamW states",
        uses_torchao_kernels=True, state_bytes_per_parameter=2,
        speed_notice="train.optim.name=adamw8bit saves optimizer memory, not time: torchao compiles its update "
                     "once per parameter shape at the first step, inside the budget (on an H100 40 steps of "
                     "crammed-bert did not finish in 120 s; docs/ablations.md)"),
    "sophia": Optimizer(  # not offloadable: the offload wrapper would have to pass the Hessian estimates on
        ("lr", "betas", "weight_decay", "gamma", "hessian_every"), _sophia,
        own_keys=(("gamma", float), ("hessian_every", int))),  # its update's scale; steps between Hessian estimates
}


def build_pretraining_optimizer(model: nn.Module, optim) -> torch.optim.Optimizer:
    """The optimizer train.optim (checked) describes, over the model's parameters."""
    return OPTIMIZERS[optim.name].build(model, optim)
