"""Adafactor (Shazeer & Stern 2018), torch's: `optim=adafactor`. Factored second moments, no first moment;
its learning rate is relative to each parameter's scale."""

import torch

from cramming.train.optimizers.base import Optimizer, optimizer_groups


class Adafactor(Optimizer):
    name = "adafactor"
    keys = ("lr", "weight_decay")
    offloadable = True

    @staticmethod
    def build(model, optim):
        return torch.optim.Adafactor(optimizer_groups(model, optim), lr=optim.lr)
