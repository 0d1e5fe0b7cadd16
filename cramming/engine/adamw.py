"""AdamW as every command builds it: weight decay on matrices only, torch's fused kernel. Pretraining's adamw
(cramming.train.optimizers), GLUE fine-tuning and the timed steps of the benchmark and the calculator (the
recipe's values, from configs/optim/adamw.yaml) all build it here, so "AdamW" means one thing in a speed figure,
a GLUE score and a pretraining run."""

import torch
from omegaconf import OmegaConf
from torch import nn

from cramming import CONFIG_DIR


def build_optimizer(model: nn.Module, *, lr: float, betas, eps: float, weight_decay: float,
                    decay_embeddings: bool = True, fused: bool = True) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices only (split by tensor rank), never on norms, biases or scalars;
    `decay_embeddings=False` exempts embedding tables too.

    fused: torch's fused kernel (CPU and CUDA), faster than the foreach implementation in our benchmark.
    """
    groups = parameter_groups(model, weight_decay, decay_embeddings)
    return torch.optim.AdamW(groups, lr=lr, betas=tuple(betas), eps=eps, fused=fused, foreach=not fused)


def recipe_adamw(model: nn.Module, *, fused: bool = True) -> torch.optim.AdamW:
    """The crammed recipe's AdamW, its values read from configs/optim/adamw.yaml (the file pretraining's
    defaults come from), for the steps that time the recipe: the benchmark and the calculator."""
    values = OmegaConf.load(CONFIG_DIR / "optim" / "adamw.yaml")
    return build_optimizer(model, lr=values.lr, betas=values.betas, eps=values.eps,
                           weight_decay=values.weight_decay, fused=fused)


def parameter_groups(model: nn.Module, weight_decay: float, decay_embeddings: bool = True) -> list[dict]:
    """Two parameter groups: matrices with `weight_decay`, and norms, biases, scalars (and embedding tables
    unless `decay_embeddings`) without."""
    embeddings = set() if decay_embeddings else {
        id(module.weight) for module in model.modules() if isinstance(module, nn.Embedding)}
    parameters = [p for p in model.parameters() if p.requires_grad]
    decayed = [p for p in parameters if p.dim() >= 2 and id(p) not in embeddings]
    exempt = [p for p in parameters if p.dim() < 2 or id(p) in embeddings]
    return [{"params": decayed, "weight_decay": weight_decay}, {"params": exempt, "weight_decay": 0.0}]
