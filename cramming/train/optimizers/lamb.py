"""LAMB (You et al. 2020, "Large Batch Optimization for Deep Learning: Training BERT in 76 minutes"), pytorch-optimizer's:
`optim=lamb`. Adam's update rescaled per layer, for large batches."""

from cramming.train.optimizers.base import Optimizer, optimizer_groups


class Lamb(Optimizer):
    name = "lamb"
    keys = ("lr", "betas", "eps", "weight_decay")
    offloadable = True

    @staticmethod
    def build(model, optim):
        from pytorch_optimizer import Lamb as LambUpdate

        return LambUpdate(optimizer_groups(model, optim), lr=optim.lr, betas=tuple(optim.betas), eps=optim.eps)
