"""Muon (Jordan et al. 2024), pytorch-optimizer's: `optim=muon`. Orthogonalized momentum for the 2-D matrices
inside the encoder's layers; AdamW groups for everything else, as its authors use it."""

from cramming.model.crammed_bert import encoder_matrices
from cramming.train.optimizers.base import Optimizer, optimizer_groups


class Muon(Optimizer):
    name = "muon"
    keys = ("lr", "momentum", "betas", "eps", "weight_decay")
    offloadable = True

    @staticmethod
    def build(model, optim):
        from pytorch_optimizer import Muon as MuonUpdate

        hidden = {id(p) for p in encoder_matrices(model).values()}
        groups = []
        for group in optimizer_groups(model, optim):
            for use_muon in (True, False):
                params = [p for p in group["params"] if (id(p) in hidden) == use_muon]
                if params:
                    groups.append({**group, "params": params, "use_muon": use_muon})
        return MuonUpdate(groups, lr=optim.lr, momentum=optim.momentum, use_adjusted_lr=True, adamw_lr=optim.lr,
                          adamw_betas=tuple(optim.betas), adamw_eps=optim.eps)
