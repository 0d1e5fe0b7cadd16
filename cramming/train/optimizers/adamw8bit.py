"""torchao's AdamW with block-wise 8-bit moments (Dettmers et al. 2022): `optim=adamw8bit`, CUDA only. 2 bytes
of state per parameter instead of 8. Matrices of 4096 or more values (a multiple of the 256-value block) get
8-bit states, the rest fp32. Its learning rate is a tensor in each group (cramming.schedules.set_lr fills it
in place)."""

from cramming.train.optimizers.base import Optimizer, optimizer_groups


class AdamW8bit(Optimizer):
    name = "adamw8bit"
    keys = ("lr", "betas", "eps", "weight_decay")
    cuda_only = "torchao's 8-bit AdamW states"
    speed_notice = ("train.optim.name=adamw8bit saves optimizer memory, not time: torchao compiles its update once "
                    "per parameter shape at the first step, inside the budget (on an H100 40 steps of crammed-bert "
                    "did not finish in 120 s; docs/ablations.md)")
    uses_torchao_kernels = True
    state_bytes_per_parameter = 2
    # not offloadable: its states would sit on the CPU

    @staticmethod
    def build(model, optim):
        from torchao.optim import AdamW8bit as AdamW8bitUpdate

        return AdamW8bitUpdate(optimizer_groups(model, optim), lr=optim.lr, betas=tuple(optim.betas), eps=optim.eps,
                               weight_decay=optim.weight_decay)
