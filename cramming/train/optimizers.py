"""The pretraining optimizer: the config group `optim` (`optim=lion`, or `train.optim.name=lion`) composes
`configs/optim/<name>.yaml`, its name and its defaults, into `train.optim`. One `Optimizer` class each, a plug-in
(cramming.plugins) whose section is `train.optim`, declaring what it reads and needs and building the torch
optimizer, and OPTIMIZERS, the registry everything else asks: the config schema (the hyperparameters), the checks,
the techniques, the preflight and the benchmark. None of those names an optimizer.

Declared at class level:
- `name`: its `train.optim.name` (and `optim=<name>`, which composes configs/optim/<name>.yaml);
- `settings`: the hyperparameters of `train.optim` it reads, `Setting`s null by default (one several optimizers
  read, such as LR, is declared once below); each is set for it and the others' stay null (`check`);
- `cuda_only`, `speed_notice`, `uses_torchao_kernels`: what it needs of the device, and where it is slower;
- `state_bytes_per_parameter`: its state in a checkpoint, at most (the disk estimate);
- `offloadable`: whether `impl.offload_optimizer` may hold it.

A hyperparameter the optimizer does not use is an error rather than silently ignored (OptimConfig.check).
Weight decay falls on matrices only for all of them (cramming.engine.adamw.parameter_groups). Implementations come
from torch.optim where it has them, from pytorch-optimizer (LAMB, Lion, Muon) and torchao (8-bit AdamW)
otherwise; SophiaG is written here. docs/ablations.md says what each does.

Adding one: its class here, one entry in OPTIMIZERS, and configs/optim/<name>.yaml with its defaults. The module
holds one concept, the pretraining optimizer choices, so it may grow past 300 lines rather than split them.
"""

from typing import ClassVar, Optional

import torch
from torch import nn

from cramming.engine.adamw import build_optimizer, parameter_groups
from cramming.errors import CrammingError, require
from cramming.model.crammed_bert import encoder_matrices
from cramming.plugins import Plugin, Registry, Setting

# The hyperparameters several optimizers read; each optimizer lists those it reads in its `settings`.
LR = Setting("train.optim.lr", Optional[float])
BETAS = Setting("train.optim.betas", Optional[tuple[float, float]])
EPS = Setting("train.optim.eps", Optional[float])
WEIGHT_DECAY = Setting("train.optim.weight_decay", Optional[float])  # on matrices only: never norms, biases or scalars
MOMENTUM = Setting("train.optim.momentum", Optional[float])


def optimizer_groups(model: nn.Module, optim) -> list[dict]:
    """The parameter groups every optimizer here takes: weight decay on matrices only."""
    return parameter_groups(model, optim.weight_decay, optim.decay_embeddings)


class Optimizer(Plugin):
    """One optimizer of `train.optim`; see the module docstring for what it declares."""

    name: ClassVar[str]
    settings: ClassVar[tuple[Setting, ...]]  # the hyperparameters it reads, all in configs/optim/<name>.yaml
    cuda_only: ClassVar[str | None] = None  # what needs CUDA, for the error elsewhere (None: runs anywhere)
    speed_notice: ClassVar[str | None] = None  # on a GPU: where it is measured slower than the default
    uses_torchao_kernels: ClassVar[bool] = False  # on a GPU, its speed depends on torchao's compiled kernels
    state_bytes_per_parameter: ClassVar[float] = 8  # at most, in a checkpoint (AdamW: two fp32 moments)
    # impl.offload_optimizer may hold it (torchao's CPUOffloadOptimizer): its update reads only the parameter,
    # its gradient and its own state
    offloadable: ClassVar[bool] = False

    @classmethod
    def build(cls, optim, model: nn.Module) -> torch.optim.Optimizer:
        """The torch optimizer over the model's parameters, from the resolved (checked) `train.optim`."""
        raise NotImplementedError

    @classmethod
    def reads(cls) -> tuple[str, ...]:
        """The keys of `train.optim` it reads."""
        return tuple(setting.key for setting in cls.settings)

    @classmethod
    def check(cls, optim) -> None:
        """Its rules on `train.optim`, before anything is built, called for every optimizer whether it is the
        chosen one or not: the chosen one requires every key it reads set, and every other optimizer's key null
        (a value it would ignore); the others have nothing to add. An optimizer with more rules extends this."""
        if optim.name != cls.name:
            return
        reads = cls.reads()
        require([(setting.key in reads or getattr(optim, setting.key) is None,
                  f"train.optim.{setting.key} is not used by train.optim.name={cls.name} (it reads {', '.join(reads)})")
                 for setting in OPTIMIZERS.settings()] +
                [(getattr(optim, key) is not None,
                  f"train.optim.{key} is null and train.optim.name={cls.name} reads it (its default: "
                  f"configs/optim/{cls.name}.yaml, which optim={cls.name} composes)") for key in reads])

    @classmethod
    def check_on_device(cls, device: torch.device) -> None:
        if cls.cuda_only and device.type != "cuda":
            raise CrammingError(f"train.optim.name={cls.name} ({cls.cuda_only}) needs a CUDA GPU; this run is on "
                                f"{device.type}: use train.optim.name=adamw")


class AdamW(Optimizer):
    """AdamW (Loshchilov & Hutter 2019, "Decoupled Weight Decay Regularization"), the crammed recipe's optimizer,
    the default; torch's fused kernel where it has one (cramming.engine.adamw)."""

    name = "adamw"
    settings = (LR, BETAS, EPS, WEIGHT_DECAY)
    offloadable = True

    @classmethod
    def build(cls, optim, model):
        return build_optimizer(model, lr=optim.lr, betas=optim.betas, eps=optim.eps,
                               weight_decay=optim.weight_decay, decay_embeddings=optim.decay_embeddings)


class Lamb(Optimizer):
    """LAMB (You et al. 2020, "Large Batch Optimization for Deep Learning: Training BERT in 76 minutes"),
    pytorch-optimizer's: Adam's update rescaled per layer, for large batches."""

    name = "lamb"
    settings = (LR, BETAS, EPS, WEIGHT_DECAY)
    offloadable = True

    @classmethod
    def build(cls, optim, model):
        from pytorch_optimizer import Lamb as LambUpdate  # noqa: PLC0415 -- only for optim=lamb

        return LambUpdate(optimizer_groups(model, optim), lr=optim.lr, betas=tuple(optim.betas), eps=optim.eps)


class Lion(Optimizer):
    """Lion (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms"), pytorch-optimizer's: one moment,
    half AdamW's state."""

    name = "lion"
    settings = (LR, BETAS, WEIGHT_DECAY)
    offloadable = True
    state_bytes_per_parameter = 4

    @classmethod
    def build(cls, optim, model):
        from pytorch_optimizer import Lion as LionUpdate  # noqa: PLC0415 -- only for optim=lion

        return LionUpdate(optimizer_groups(model, optim), lr=optim.lr, betas=tuple(optim.betas))


class SgdNesterov(Optimizer):
    """SGD with Nesterov momentum (Sutskever et al. 2013), torch's: one momentum buffer."""

    name = "sgd-nesterov"
    settings = (LR, MOMENTUM, WEIGHT_DECAY)
    offloadable = True
    state_bytes_per_parameter = 4

    @classmethod
    def build(cls, optim, model):
        return torch.optim.SGD(optimizer_groups(model, optim), lr=optim.lr, momentum=optim.momentum, nesterov=True)


class Adafactor(Optimizer):
    """Adafactor (Shazeer & Stern 2018), torch's: factored second moments, no first moment; its learning rate is
    relative to each parameter's scale."""

    name = "adafactor"
    settings = (LR, WEIGHT_DECAY)
    offloadable = True

    @classmethod
    def build(cls, optim, model):
        return torch.optim.Adafactor(optimizer_groups(model, optim), lr=optim.lr)


class Muon(Optimizer):
    """Muon (Jordan et al. 2024), pytorch-optimizer's: orthogonalized momentum for the 2-D matrices inside the
    encoder's layers; AdamW groups for everything else, as its authors use it."""

    name = "muon"
    settings = (LR, MOMENTUM, BETAS, EPS, WEIGHT_DECAY)
    offloadable = True

    @classmethod
    def build(cls, optim, model):
        from pytorch_optimizer import Muon as MuonUpdate  # noqa: PLC0415 -- only for optim=muon

        hidden = {id(p) for p in encoder_matrices(model).values()}
        groups = []
        for group in optimizer_groups(model, optim):
            for use_muon in (True, False):
                params = [p for p in group["params"] if (id(p) in hidden) == use_muon]
                if params:
                    groups.append({**group, "params": params, "use_muon": use_muon})
        return MuonUpdate(groups, lr=optim.lr, momentum=optim.momentum, use_adjusted_lr=True, adamw_lr=optim.lr,
                          adamw_betas=tuple(optim.betas), adamw_eps=optim.eps)


class AdamW8bit(Optimizer):
    """torchao's AdamW with block-wise 8-bit moments (Dettmers et al. 2022), CUDA only: 2 bytes of state per
    parameter instead of 8. Matrices of 4096 or more values (a multiple of the 256-value block) get 8-bit states,
    the rest fp32. Its learning rate is a tensor in each group (cramming.engine.step.set_lr fills it in place)."""

    name = "adamw8bit"
    settings = (LR, BETAS, EPS, WEIGHT_DECAY)
    cuda_only = "torchao's 8-bit AdamW states"
    speed_notice = ("train.optim.name=adamw8bit saves optimizer memory, not time: torchao compiles its update once "
                    "per parameter shape at the first step, inside the budget (on an H100 40 steps of crammed-bert "
                    "did not finish in 120 s; docs/ablations.md)")
    uses_torchao_kernels = True
    state_bytes_per_parameter = 2
    # not offloadable: its states would sit on the CPU

    @classmethod
    def build(cls, optim, model):
        from torchao.optim import AdamW8bit as AdamW8bitUpdate  # noqa: PLC0415 -- torchao, CUDA only: optim=adamw8bit

        return AdamW8bitUpdate(optimizer_groups(model, optim), lr=optim.lr, betas=tuple(optim.betas), eps=optim.eps,
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


class Sophia(Optimizer):
    """SophiaG's update (above) with the Hessian estimates of the technique cramming.train.techniques.sophia_hessian,
    which switches on with it."""

    name = "sophia"
    settings = (
        LR, BETAS, WEIGHT_DECAY,
        Setting("train.optim.gamma", Optional[float]),  # its update's scale
        Setting("train.optim.hessian_every", Optional[int]),  # optimizer steps between Hessian estimates
    )
    # not offloadable: the offload wrapper would have to pass the Hessian estimates on

    @classmethod
    def build(cls, optim, model) -> SophiaG:
        return SophiaG(optimizer_groups(model, optim), lr=optim.lr, betas=tuple(optim.betas), gamma=optim.gamma,
                       weight_decay=optim.weight_decay)


OPTIMIZERS: Registry[type[Optimizer]] = Registry("train.optim.name", (AdamW, Lamb, Lion, SgdNesterov, Adafactor,
                                                                      Muon, AdamW8bit, Sophia))


def build_pretraining_optimizer(model: nn.Module, optim) -> torch.optim.Optimizer:
    """The optimizer train.optim (checked) describes, over the model's parameters."""
    return OPTIMIZERS.named(optim.name).build(optim, model)
