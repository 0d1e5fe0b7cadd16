"""The pretraining optimizer: the config group `optim` (`optim=lion`, or `train.optim.name=lion`) composes
`configs/optim/<name>.yaml`, its name and its defaults, into `train.optim`; OPTIMIZERS holds every choice.

A hyperparameter the optimizer does not use is an error rather than silently ignored (OptimConfig.check).
Weight decay falls on matrices only for all of them (cramming.adamw.parameter_groups). Implementations come
from torch.optim where it has them and from pytorch-optimizer (LAMB, Lion, Muon with its AdamW groups)
otherwise, and torchao's AdamW8bit (CUDA only); SophiaG is written here (sophia.py; its Hessian estimates come
from the technique cramming.train.techniques.sophia_hessian). base.py says what an entry declares; docs/ablations.md
what each does. Adding one: its builder (in its own file if it is written here), one line in OPTIMIZERS, and
configs/optim/<name>.yaml.
"""

import torch
from torch import nn

from cramming.adamw import build_optimizer
from cramming.model.crammed_bert import encoder_matrices
from cramming.train.optimizers.base import Optimizer, optimizer_groups
from cramming.train.optimizers.sophia import SOPHIA


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
    "sophia": SOPHIA,
}


def build_pretraining_optimizer(model: nn.Module, optim) -> torch.optim.Optimizer:
    """The optimizer train.optim (checked) describes, over the model's parameters."""
    return OPTIMIZERS[optim.name].build(model, optim)
