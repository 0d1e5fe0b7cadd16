"""Heads on top of the encoder: masked-language-model decoder and the [CLS] classifier for GLUE."""

from collections import OrderedDict

import torch
import torch.nn.functional as F
from torch import nn


class MaskedLMHead(nn.Module):
    """Optional BERT transform (dense, GELU, LayerNorm), then the decoder tied to the token embedding."""

    def __init__(self, cfg, vocab_size: int):
        super().__init__()
        if cfg.head_transform:
            self.transform = nn.Sequential(
                OrderedDict(
                    dense=nn.Linear(cfg.hidden_size, cfg.hidden_size, bias=cfg.bias),
                    act=nn.GELU(),
                    LayerNorm=nn.LayerNorm(cfg.hidden_size, eps=cfg.norm_eps),
                )
            )
        else:
            self.transform = nn.Identity()
        self.bias = nn.Parameter(torch.zeros(vocab_size)) if cfg.bias else None

    def forward(self, x: torch.Tensor, decoder_weight: torch.Tensor) -> torch.Tensor:
        """x (B, T, C) and the embedding matrix (V, C) to logits (B, T, V)."""
        return F.linear(self.transform(x), decoder_weight, self.bias)


class ClassificationHead(nn.Module):
    """BERT's pooler (dense + tanh on the [CLS] position), dropout, then a linear classifier.

    The same module serves local and exported checkpoints, so a GLUE score never depends on the code path.
    """

    def __init__(self, cfg, num_labels: int):
        super().__init__()
        self.dense = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.dropout = nn.Dropout(cfg.dropout)
        self.classifier = nn.Linear(cfg.hidden_size, num_labels)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden (B, T, C) to logits (B, num_labels); position 0 holds [CLS]."""
        pooled = torch.tanh(self.dense(hidden[:, 0]))  # (B, C)
        return self.classifier(self.dropout(pooled))
