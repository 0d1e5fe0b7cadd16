"""The building blocks of Crammed BERT, bottom up: position codes, embeddings, attention, feed-forward, and
the layer that puts them together with its residuals and norms. The encoder and heads: crammed_bert.py.

Imports only torch: part of the export's remote code. Names follow transformers' BERT (embeddings,
attention, intermediate/output, LayerNorm) where they fit.
"""

import math

import torch
import torch.nn.functional as F
from torch import nn

from .unpadded import Unpadded


def sinusoids(length: int, dim: int, device: torch.device) -> torch.Tensor:
    """Fixed sin/cos position codes (length, dim), computed on the fly: no buffer to save or to restore."""
    position = torch.arange(length, device=device, dtype=torch.float32)
    inv_freq = torch.exp(-math.log(10000.0) * torch.arange(0, dim, 2, device=device, dtype=torch.float32) / dim)
    angles = position[:, None] * inv_freq[None, :]  # (T, dim/2)
    return torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(1)  # (T, dim): sin, cos interleaved


def gather_rows(x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """x (B, T, C) at positions (B, k) -> (B, k, C)."""
    return x.gather(1, positions[:, :, None].expand(-1, -1, x.size(-1)))


def layer_norm(cfg) -> nn.LayerNorm:
    return nn.LayerNorm(cfg.hidden_size, eps=cfg.norm_eps, bias=cfg.norm_bias)


def attends_globally(cfg, index: int) -> bool:
    """Whether layer `index` attends to every token (else within the sliding window), ModernBERT's rule."""
    return index % cfg.global_attn_every_n_layers == 0


def has_local_layers(cfg) -> bool:
    return not all(attends_globally(cfg, index) for index in range(cfg.num_layers))


def rotary(positions: torch.Tensor, head_size: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin (*positions.shape, hs) of rotary position codes (RoPE, Su et al. 2021): the angle of
    frequency i, theta^(-2i/hs), in both halves of a head, which rotate as pairs (i, i + hs/2). Computed on
    the fly in fp32, as transformers' ModernBERT computes them: no buffer to save or to restore."""
    exponents = torch.arange(0, head_size, 2, device=positions.device, dtype=torch.float) / head_size
    inv_freq = 1.0 / (theta**exponents)  # (hs/2,)
    angles = positions[..., None].float() * inv_freq  # (..., hs/2)
    angles = torch.cat((angles, angles), dim=-1)  # (..., hs)
    return angles.cos(), angles.sin()


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x (..., hs) rotated by the angles of cos and sin (broadcast to x), in fp32."""
    first, second = x.float().chunk(2, dim=-1)  # (..., hs/2) each
    return (x.float() * cos + torch.cat((-second, first), dim=-1) * sin).to(x.dtype)


def window_mask(query_positions: torch.Tensor, key_positions: torch.Tensor, half_window: int,
                key_mask: torch.Tensor | None = None) -> torch.Tensor:
    """Where a sliding-window layer's queries may attend: keys at most half_window positions away, of them
    the real ones (key_mask (B, 1, 1, T)), and always the query's own position, so that no row is empty (a
    padded query far from every real token attends to itself; its output is ignored).

    query_positions (Tq,) or (B, Tq), key_positions (T,) -> bool (Tq, T), or (B, 1, Tq, T) with either
    a key mask or per-row queries.
    """
    distance = query_positions[..., :, None] - key_positions  # (Tq, T) or (B, Tq, T)
    if distance.dim() == 3:
        distance = distance[:, None]  # (B, 1, Tq, T)
    allowed = distance.abs() <= half_window
    return allowed if key_mask is None else allowed & (key_mask | (distance == 0))


class Embeddings(nn.Module):
    """Token embedding plus positions (scaled sinusoids or a learned table; rotary positions act in the
    attention instead), then LayerNorm and dropout."""

    def __init__(self, cfg, vocab_size: int):
        super().__init__()
        self.max_positions = cfg.max_position_embeddings
        self.word_embeddings = nn.Embedding(vocab_size, cfg.hidden_size)
        self.position_embeddings = self.position_scale = None
        if cfg.positions == "learned":
            self.position_embeddings = nn.Embedding(cfg.max_position_embeddings, cfg.hidden_size)
        elif cfg.positions == "scaled-sinusoidal":
            # One learned scalar brings unit-amplitude sinusoids to the scale of the token embeddings.
            self.position_scale = nn.Parameter(torch.tensor(cfg.hidden_size**-0.5))
        self.LayerNorm = layer_norm(cfg)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, input_ids: torch.Tensor, unpadded: Unpadded | None = None) -> torch.Tensor:
        """input_ids (B, T) -> (B, T, C), or (N, C) for the real tokens only when `unpadded`."""
        T = input_ids.size(1)
        if T > self.max_positions:
            raise ValueError(f"sequence length {T} exceeds max_position_embeddings {self.max_positions}")
        x = self.word_embeddings(input_ids)  # (B, T, C)
        if self.position_embeddings is not None:
            x = x + self.position_embeddings.weight[:T]
        elif self.position_scale is not None:
            x = x + self.position_scale * sinusoids(T, x.size(-1), x.device).to(x.dtype)  # bf16 weights stay bf16
        if unpadded is not None:
            x = unpadded.unpad(x)  # (N, C)
        return self.dropout(self.LayerNorm(x))


class BranchLinear(nn.Linear):
    """A Linear inside a residual branch. Its rows may hold several matrices fused into one GEMM (query, key,
    value; GLU's gate, value): to the xavier inits of tfixup and deepnorm each is a matrix of its own, and
    those on the value path (all but query and key) are shrunk."""

    def __init__(self, in_features: int, out_features: int, bias: bool, value_path=(True,)):
        super().__init__(in_features, out_features, bias)
        self.value_path: tuple[bool, ...] = value_path  # per fused matrix, in row order


class ResidualOutput(BranchLinear):
    """The last Linear of a residual branch: init_scheme=scaled shrinks its initialization."""


def eager_attention(q, k, v, mask, dropout_p: float) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(q kᵀ / √d) v written out, for when the attention probabilities themselves are wanted
    (`output_attentions`, `attn_implementation="eager"`): q (B, nh, Tq, hs), k, v (B, nh, T, hs)."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (B, nh, Tq, T)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    probs = scores.softmax(dim=-1)
    return F.dropout(probs, dropout_p) @ v, probs  # (B, nh, Tq, hs), (B, nh, Tq, T)


class SelfAttention(nn.Module):
    """Multi-head self-attention through F.scaled_dot_product_attention (flash / memory-efficient kernels).

    Layer `index` attends to every token, or within a sliding window (global_attn_every_n_layers): a mask
    on the full T x T product. With positions=rope its queries and keys are rotated by their positions,
    with the theta of its kind (global or local).
    """

    def __init__(self, cfg, index: int = 0):
        super().__init__()
        self.num_heads = cfg.num_heads
        self.dropout_p = cfg.dropout
        globally = attends_globally(cfg, index)
        self.half_window = None if globally else cfg.local_attention // 2
        self.rope_theta = None
        if cfg.positions == "rope":
            self.rope_theta = cfg.global_rope_theta if globally else cfg.local_rope_theta
        # query, key, value: one GEMM
        self.qkv = BranchLinear(cfg.hidden_size, 3 * cfg.hidden_size, cfg.bias, (False, False, True))
        self.dense = ResidualOutput(cfg.hidden_size, cfg.hidden_size, bias=cfg.bias)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None, positions: torch.Tensor | None = None,
                eager: bool = False, unpadded: Unpadded | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x (B, T, C); mask None or bool (B, 1, 1, T), True where a key may be attended to. Returns the
        output and, with `eager`, the attention probabilities (B, nh, T, T) (else None: SDPA keeps them).

        With positions (B, k) only those rows attend (to all T keys): output (B, k, C) instead of (B, T, C).
        With `unpadded`, x holds the real tokens of a padded batch only, (N, C), and so does the output.
        """
        dropout_p = self.dropout_p if self.training else 0.0
        C = x.size(-1)
        nh, hs = self.num_heads, C // self.num_heads
        if unpadded is not None and unpadded.per_sequence_attention and not eager:
            q, k, v = self.qkv(x).view(-1, 3, nh, hs).unbind(1)  # (N, nh, hs) each
            at = unpadded.positions[:, None]  # (N, 1): each token's place in its row
            y = unpadded.attend_each_sequence(self._rotated(q, at), self._rotated(k, at), v, dropout_p,
                                              self.half_window)  # (N, C)
            return self.dropout(self.dense(y)), None
        B, T = x.shape[:2] if unpadded is None else (unpadded.batch_size, unpadded.seq_length)
        if positions is None:
            qkv = self.qkv(x)  # (B, T, 3C), or (N, 3C)
            if unpadded is not None:
                qkv = unpadded.pad(qkv)  # (B, T, 3C): back in place for one batched (masked) product
            q, k, v = qkv.view(B, T, 3, nh, hs).permute(2, 0, 3, 1, 4)  # (B, nh, T, hs) each
        else:
            w_q, w_kv = self.qkv.weight.split((C, 2 * C))
            b_q, b_kv = (None, None) if self.qkv.bias is None else self.qkv.bias.split((C, 2 * C))
            q = F.linear(gather_rows(x, positions), w_q, b_q)  # (B, k, C)
            q = q.view(B, -1, nh, hs).transpose(1, 2)  # (B, nh, k, hs)
            k, v = F.linear(x, w_kv, b_kv).view(B, T, 2, nh, hs).permute(2, 0, 3, 1, 4)  # (B, nh, T, hs) each
        if self.rope_theta is not None or self.half_window is not None:
            key_positions = torch.arange(T, device=x.device)  # (T,)
            q = self._rotated(q, key_positions if positions is None else positions[:, None])  # (B, 1, k) rows
            k = self._rotated(k, key_positions)
            if self.half_window is not None:
                query_positions = key_positions if positions is None else positions  # (T,) or (B, k)
                mask = window_mask(query_positions, key_positions, self.half_window, mask)
        if eager:
            y, probs = eager_attention(q, k, v, mask, dropout_p)
        else:
            y, probs = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p), None
        y = y.transpose(1, 2).reshape(B, -1, C)  # (B, T or k, C)
        if unpadded is not None:
            y = unpadded.unpad(y)  # (N, C)
        return self.dropout(self.dense(y)), probs

    def _rotated(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Queries or keys (..., L, hs) rotated by positions broadcastable to (..., L) (with rope)."""
        if self.rope_theta is None:
            return x
        return rotate(x, *rotary(positions, x.size(-1), self.rope_theta))


class FeedForward(nn.Module):
    """BERT's intermediate + output. With ffn=glu the intermediate is split in halves: GELU(gate) * value."""

    def __init__(self, cfg):
        super().__init__()
        self.glu = cfg.ffn == "glu"
        width = cfg.intermediate_size // 2 if self.glu else cfg.intermediate_size
        value_path = (True, True) if self.glu else (True,)  # GLU: gate and value
        self.intermediate = BranchLinear(cfg.hidden_size, cfg.intermediate_size, cfg.bias, value_path)
        self.output = ResidualOutput(width, cfg.hidden_size, bias=cfg.bias)
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
    """Transformer layer `index`: pre-LN x + f(LN x) (the crammed choice), post-LN LN(x + f(x)) (BERT's), or
    no LayerNorm, x + f(x) (norm_scheme=none). rezero and skipinit gate the branches with learned scalars that
    start at 0, x + g·f(x), so the layer starts as the identity; deepnorm up-weights x: LN(α·x + f(x)).
    """

    def __init__(self, cfg, index: int = 0):
        super().__init__()
        self.pre_norm = cfg.norm_scheme == "pre"
        no_norm = cfg.norm_scheme == "none"
        # first_layer_attention_norm=false: layer 0 reads the embeddings, already normed, as ModernBERT does
        no_attention_norm = no_norm or (index == 0 and not cfg.first_layer_attention_norm)
        self.attention_norm = nn.Identity() if no_attention_norm else layer_norm(cfg)
        self.attention = SelfAttention(cfg, index)
        self.ffn_norm = nn.Identity() if no_norm else layer_norm(cfg)
        self.ffn = FeedForward(cfg)
        # rezero (Bachlechner et al. 2020): one gate for both branches, as in its transformer; skipinit (De &
        # Smith 2020): one per branch. (1,) or (2,): attention, ffn.
        gates = {"rezero": 1, "skipinit": 2}.get(cfg.init_scheme)
        self.residual_gate = nn.Parameter(torch.zeros(gates)) if gates else None
        # DeepNet (Wang et al. 2022): α = (2N)^1/4 for an encoder-only model
        self.residual_scale = (2 * cfg.num_layers) ** 0.25 if cfg.init_scheme == "deepnorm" else 1.0

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None, positions: torch.Tensor | None = None,
                eager: bool = False, unpadded: Unpadded | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x (B, T, C) -> (B, T, C), or (B, k, C) when only the rows at positions (B, k) are wanted, or
        (N, C) -> (N, C) for the real tokens of an `unpadded` batch; with the attention probabilities when
        `eager` (see SelfAttention)."""
        residual = x if positions is None else gather_rows(x, positions)
        # a gate per branch, (1,) or (2,) -> two scalars: rezero's one gate serves both
        gates = (None, None) if self.residual_gate is None else self.residual_gate.expand(2)
        attention_gate, ffn_gate = gates
        if self.pre_norm:
            attended, probs = self.attention(self.attention_norm(x), mask, positions, eager, unpadded)
            x = self._add(residual, attended, attention_gate)
            return self._add(x, self.ffn(self.ffn_norm(x)), ffn_gate), probs
        attended, probs = self.attention(x, mask, positions, eager, unpadded)
        x = self.attention_norm(self._add(residual, attended, attention_gate))
        return self.ffn_norm(self._add(x, self.ffn(x), ffn_gate)), probs

    def _add(self, x: torch.Tensor, branch: torch.Tensor, gate: torch.Tensor | None) -> torch.Tensor:
        """The residual sum: x + f(x), x + g·f(x) with a gate (rezero, skipinit) or α·x + f(x) (deepnorm)."""
        if gate is not None:
            return x + gate * branch
        return x + branch if self.residual_scale == 1.0 else self.residual_scale * x + branch
