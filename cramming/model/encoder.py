"""The encoder: embeddings, a stack of transformer layers, an optional final LayerNorm."""

import torch
from torch import nn

from .layers import Embeddings, Layer


class Encoder(nn.Module):
    """Token ids (B, T) to hidden states; `attention_mask` (B, T) is 1 for real tokens, 0 for padding."""

    def __init__(self, cfg, vocab_size: int):
        super().__init__()
        self.embeddings = Embeddings(cfg, vocab_size)
        self.layer = nn.ModuleList(Layer(cfg) for _ in range(cfg.num_layers))
        self.final_norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.norm_eps) if cfg.final_norm else nn.Identity()

    def forward(self, input_ids, attention_mask=None, positions=None) -> torch.Tensor:
        """Hidden states (B, T, C), or (B, k, C) at positions (B, k) only: then the last layer computes its
        queries and feed-forward for those rows alone (sparse prediction needs no other output)."""
        # Padding is masked out as keys; padded query rows still compute (no NaN) and are ignored downstream.
        mask = None if attention_mask is None else attention_mask.bool()[:, None, None, :]  # (B, 1, 1, T)
        x = self.embeddings(input_ids)  # (B, T, C)
        for layer in self.layer[:-1]:
            x = layer(x, mask)
        x = self.layer[-1](x, mask, positions)  # (B, T or k, C)
        return self.final_norm(x)
