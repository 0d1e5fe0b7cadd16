"""Building blocks of the encoder: embeddings, self-attention, feed-forward, one transformer layer.

Imports only torch: the `transformers` export copies this file as part of its remote code. A module
reads its settings from `cfg` (an arch ModelConfig, or the exported CrammedBertConfig with the same keys).
"""

import math

import torch
import torch.nn.functional as F
from torch import nn


def sinusoids(length: int, dim: int, device: torch.device) -> torch.Tensor:
    """Fixed sin/cos position codes (length, dim), computed on the fly: no buffer to save or to restore."""
    position = torch.arange(length, device=device, dtype=torch.float32)
    exponent = torch.arange(0, dim, 2, device=device, dtype=torch.float32) / dim
    inv_freq = torch.exp(-math.log(10000.0) * exponent)
    angles = position[:, None] * inv_freq[None, :]  # (T, dim/2)
    return torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(1)  # (T, dim): sin, cos interleaved


def gather_rows(x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """x (B, T, C) at positions (B, k) -> (B, k, C)."""
    return x.gather(1, positions[:, :, None].expand(-1, -1, x.size(-1)))


class Embeddings(nn.Module):
    """Token embedding plus positions (scaled sinusoids or a learned table), then LayerNorm and dropout."""

    def __init__(self, cfg, vocab_size: int):
        super().__init__()
        self.max_positions = cfg.max_position_embeddings
        self.word_embeddings = nn.Embedding(vocab_size, cfg.hidden_size)
        if cfg.positions == "learned":
            self.position_embeddings = nn.Embedding(cfg.max_position_embeddings, cfg.hidden_size)
        else:
            self.position_embeddings = None
            # One learned scalar brings unit-amplitude sinusoids to the scale of the token embeddings.
            self.position_scale = nn.Parameter(torch.tensor(cfg.hidden_size**-0.5))
        self.LayerNorm = nn.LayerNorm(cfg.hidden_size, eps=cfg.norm_eps)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        T = input_ids.size(1)
        if T > self.max_positions:
            raise ValueError(f"sequence length {T} exceeds max_position_embeddings {self.max_positions}")
        x = self.word_embeddings(input_ids)  # (B, T, C)
        if self.position_embeddings is not None:
            x = x + self.position_embeddings.weight[:T]
        else:
            x = x + self.position_scale * sinusoids(T, x.size(-1), x.device)
        return self.dropout(self.LayerNorm(x))


class SelfAttention(nn.Module):
    """Multi-head self-attention through F.scaled_dot_product_attention (flash / memory-efficient kernels)."""

    def __init__(self, cfg):
        super().__init__()
        self.num_heads = cfg.num_heads
        self.dropout_p = cfg.dropout
        # query, key and value in one GEMM
        self.qkv = nn.Linear(cfg.hidden_size, 3 * cfg.hidden_size, bias=cfg.bias)
        self.dense = nn.Linear(cfg.hidden_size, cfg.hidden_size, bias=cfg.bias)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None, positions: torch.Tensor | None = None):
        """x (B, T, C); mask None or bool (B, 1, 1, T), True where a key may be attended to.

        With positions (B, k) only those rows attend (to all T keys): output (B, k, C) instead of (B, T, C).
        """
        B, T, C = x.shape
        nh, hs = self.num_heads, C // self.num_heads
        if positions is None:
            q, k, v = self.qkv(x).view(B, T, 3, nh, hs).permute(2, 0, 3, 1, 4)  # (B, nh, T, hs) each
        else:
            w_q, w_kv = self.qkv.weight.split((C, 2 * C))
            b_q, b_kv = (None, None) if self.qkv.bias is None else self.qkv.bias.split((C, 2 * C))
            q = F.linear(gather_rows(x, positions), w_q, b_q)  # (B, k, C)
            q = q.view(B, -1, nh, hs).transpose(1, 2)  # (B, nh, k, hs)
            k, v = F.linear(x, w_kv, b_kv).view(B, T, 2, nh, hs).permute(2, 0, 3, 1, 4)  # (B, nh, T, hs) each
        dropout_p = self.dropout_p if self.training else 0.0
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)
        y = y.transpose(1, 2).reshape(B, -1, C)  # (B, T or k, C)
        return self.dropout(self.dense(y))


class FeedForward(nn.Module):
    """BERT's intermediate + output. With ffn=glu the intermediate is split in halves: GELU(gate) * value."""

    def __init__(self, cfg):
        super().__init__()
        self.glu = cfg.ffn == "glu"
        width = cfg.intermediate_size // 2 if self.glu else cfg.intermediate_size
        self.intermediate = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=cfg.bias)
        self.output = nn.Linear(width, cfg.hidden_size, bias=cfg.bias)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.intermediate(x)  # (B, T, I)
        if self.glu:
            gate, value = h.chunk(2, dim=-1)  # (B, T, I/2) each
            h = F.gelu(gate) * value
        else:
            h = F.gelu(h)
        return self.dropout(self.output(h))


class Layer(nn.Module):
    """One transformer layer; pre-LN (x + f(LN x), the crammed choice) or post-LN (LN(x + f(x)), BERT's)."""

    def __init__(self, cfg):
        super().__init__()
        self.pre_norm = cfg.norm_scheme == "pre"
        self.attention_norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.norm_eps)
        self.attention = SelfAttention(cfg)
        self.ffn_norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.norm_eps)
        self.ffn = FeedForward(cfg)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None, positions: torch.Tensor | None = None):
        """x (B, T, C) -> (B, T, C), or (B, k, C) when only the rows at positions (B, k) are wanted."""
        residual = x if positions is None else gather_rows(x, positions)
        if self.pre_norm:
            x = residual + self.attention(self.attention_norm(x), mask, positions)
            return x + self.ffn(self.ffn_norm(x))
        x = self.attention_norm(residual + self.attention(x, mask, positions))
        return self.ffn_norm(x + self.ffn(x))
