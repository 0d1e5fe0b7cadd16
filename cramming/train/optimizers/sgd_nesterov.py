"""SGD with Nesterov momentum (Sutskever et al. 2013), torch's: `optim=sgd-nesterov`. One momentum buffer."""

import torch

from cramming.train.optimizers.base import Optimizer, optimizer_groups


class SgdNesterov(Optimizer):
    name = "sgd-nesterov"
    keys = ("lr", "momentum", "weight_decay")
    offloadable = True
    state_bytes_per_parameter = 4

    @staticmethod
    def build(model, optim):
        return torch.optim.SGD(optimizer_groups(model, optim), lr=optim.lr, momentum=optim.momentum, nesterov=True)
