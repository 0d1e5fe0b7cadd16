"""Lion (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms"), pytorch-optimizer's: `optim=lion`.
One moment: half AdamW's state."""

from cramming.train.optimizers.base import Optimizer, optimizer_groups


class Lion(Optimizer):
    name = "lion"
    keys = ("lr", "betas", "weight_decay")
    offloadable = True
    state_bytes_per_parameter = 4

    @staticmethod
    def build(model, optim):
        from pytorch_optimizer import Lion as LionUpdate

        return LionUpdate(optimizer_groups(model, optim), lr=optim.lr, betas=tuple(optim.betas))
