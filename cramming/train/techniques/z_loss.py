"""The z-loss (Chowdhery et al., 2022, "PaLM: Scaling Language Modeling with Pathways", section 5; Zoph et al.,
2022, "ST-MoE: Designing Stable and Transferable Sparse Expert Models"): `train.z_loss.weight=<w>`.

The loss gains w * mean(log(Z)^2) over the predicted positions, Z the softmax's normalizer (the logsumexp of
a position's logits). The softmax does not change when every logit moves by the same amount, so nothing but this
term keeps log(Z) near 0: it stops the logits from drifting large, which is what overflows first in fp16 and
loses precision in bf16, without changing what the model predicts. PaLM used w = 1e-4. It costs one logsumexp
over the vocabulary per predicted position (the sparse head's k of each row, or all T without sparse
prediction). It keeps no state: a resumed run continues exactly.
"""

import math
from dataclasses import dataclass

import torch

from cramming.data.mlm import IGNORE_INDEX, labels_at_logits
from cramming.errors import require
from cramming.plugins import Setting
from cramming.train.callbacks import TrainState
from cramming.train.techniques.base import RunContext, Technique


@dataclass
class ZLossConfig:
    """`train.z_loss`: a penalty on the softmax normalizer's log; off at weight 0."""

    weight: float = 0.0  # w in loss + w * mean(log(Z)^2); PaLM's 1e-4


def z_penalty(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """mean(log(Z)^2) over the positions with a label: logits (B, k, V) or (B, T, V), labels (B, k) or (B, T)."""
    log_z = torch.logsumexp(logits.float(), dim=-1)  # (B, k or T)
    counted = (labels != IGNORE_INDEX).float()
    return (log_z.square() * counted).sum() / counted.sum().clamp(min=1)


class ZLoss(Technique):
    name, override = "z-loss", "train.z_loss"
    switch = "train.z_loss.weight"
    settings = (Setting("train.z_loss", ZLossConfig),)
    variant_overrides = ("train.z_loss.weight=1e-4",)

    def __init__(self, weight: float):
        self.weight = weight

    @classmethod
    def check(cls, cfg) -> None:
        weight = cfg.train.z_loss.weight
        require([(math.isfinite(weight) and weight >= 0,
                  f"train.z_loss.weight={weight} must be a finite number, 0 or more (0: off)")])

    @classmethod
    def build(cls, cfg, run: RunContext) -> "ZLoss":
        return cls(cfg.train.z_loss.weight)

    def after_forward(self, state: TrainState, batch: dict, loss: torch.Tensor, output) -> torch.Tensor:
        return loss + self.weight * z_penalty(output.logits, labels_at_logits(batch, output.logits))
