"""AdamW (Loshchilov & Hutter 2019, "Decoupled Weight Decay Regularization"), the crammed recipe's optimizer:
`optim=adamw`, the default. torch's fused kernel where it has one (cramming.adamw)."""

from cramming.adamw import build_optimizer
from cramming.train.optimizers.base import Optimizer


class AdamW(Optimizer):
    name = "adamw"
    keys = ("lr", "betas", "eps", "weight_decay")
    offloadable = True

    @staticmethod
    def build(model, optim):
        return build_optimizer(model, lr=optim.lr, betas=optim.betas, eps=optim.eps,
                               weight_decay=optim.weight_decay, decay_embeddings=optim.decay_embeddings)
