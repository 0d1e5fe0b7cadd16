"""Crammed BERT, top to bottom: config, embeddings, attention, feed-forward, layer, encoder, heads, init.

Imports only torch: the `transformers` export ships this very file as the model's remote code, so an
exported model runs the same forward pass and the same initialization as the one that trained. Names
follow transformers' BERT (embeddings, attention, intermediate/output, LayerNorm) where they fit.
"""

import math
from collections import OrderedDict
from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class ModelConfig:
    """The architecture by its components, so each choice of the recipe can be ablated on its own.

    The defaults are crammed-bert's. cramming.model.config registers this as the Hydra schema of `arch`
    and checks values; a module reads the same keys from the exported CrammedBertConfig.
    """

    name: str = "???"  # label, e.g. crammed-bert; required ("???" is OmegaConf's missing value)
    num_layers: int = 16
    hidden_size: int = 768
    num_heads: int = 12
    intermediate_size: int = 3072  # with ffn=glu: split into gate and value halves of intermediate_size / 2
    ffn: str = "glu"  # glu: GELU(gate) * value | gelu: GELU(x), as in BERT
    norm_scheme: str = "pre"  # pre: x + f(LN x) | post: LN(x + f(x)), as in BERT | none: x + f(x)
    final_norm: bool = True  # LayerNorm after the last layer
    bias: bool = False  # biases in every Linear of the encoder and MLM head (decoder bias included)
    positions: str = "scaled-sinusoidal"  # scaled-sinusoidal: fixed sinusoids x one learned scalar | learned
    max_position_embeddings: int = 128  # longest input; also the size of a learned position table
    head_transform: bool = False  # BERT's dense + GELU + LayerNorm before the MLM decoder
    sparse_prediction: bool = True  # run the decoder and loss on the masked positions only
    norm_eps: float = 1e-12
    # normal: N(0, init_std) | scaled: residual output projections / sqrt(2L) | small | rezero | skipinit |
    # tfixup | deepnorm: see init_module (and Layer: the gates of rezero and skipinit, deepnorm's α)
    init_scheme: str = "normal"
    init_std: float = 0.02  # std of every weight that the init_scheme does not set otherwise
    dropout: float = 0.0  # embeddings, attention probs, residual branches, classifier; 0 in pretraining


def sinusoids(length: int, dim: int, device: torch.device) -> torch.Tensor:
    """Fixed sin/cos position codes (length, dim), computed on the fly: no buffer to save or to restore."""
    position = torch.arange(length, device=device, dtype=torch.float32)
    inv_freq = torch.exp(-math.log(10000.0) * torch.arange(0, dim, 2, device=device, dtype=torch.float32) / dim)
    angles = position[:, None] * inv_freq[None, :]  # (T, dim/2)
    return torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(1)  # (T, dim): sin, cos interleaved


def gather_rows(x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """x (B, T, C) at positions (B, k) -> (B, k, C)."""
    return x.gather(1, positions[:, :, None].expand(-1, -1, x.size(-1)))


class Unpadded(NamedTuple):
    """Where the real tokens of a padded batch (B, T) are, so that it can run without its padding: as the
    (N, C) rows of its real tokens, each sequence's tokens consecutive, in batch order."""

    indices: torch.Tensor  # (N,) flat indices in B * T of the real tokens
    lengths: list[int]  # (B,) real tokens per sequence
    batch_size: int
    seq_length: int
    # Attention one sequence at a time, unpadded (faster on a CPU), or as one padded, masked batched call
    # (one kernel launch, for GPUs).
    per_sequence_attention: bool

    @classmethod
    def from_mask(cls, attention_mask: torch.Tensor) -> "Unpadded":
        """attention_mask (B, T): 1 for real tokens, 0 for padding (anywhere in the row)."""
        indices = attention_mask.flatten().nonzero().squeeze(1)
        return cls(indices, attention_mask.sum(1).tolist(), *attention_mask.shape,
                   per_sequence_attention=attention_mask.device.type == "cpu")

    def unpad(self, x: torch.Tensor) -> torch.Tensor:
        return x.flatten(0, 1).index_select(0, self.indices)  # (B, T, C) -> (N, C)

    def pad(self, x: torch.Tensor) -> torch.Tensor:
        """(N, C) -> (B, T, C), zeros at the padding."""
        padded = x.new_zeros(self.batch_size * self.seq_length, x.size(-1)).index_copy(0, self.indices, x)
        return padded.view(self.batch_size, self.seq_length, -1)


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

    def forward(self, input_ids: torch.Tensor, unpadded: Unpadded | None = None) -> torch.Tensor:
        """input_ids (B, T) -> (B, T, C), or (N, C) for the real tokens only when `unpadded`."""
        T = input_ids.size(1)
        if T > self.max_positions:
            raise ValueError(f"sequence length {T} exceeds max_position_embeddings {self.max_positions}")
        x = self.word_embeddings(input_ids)  # (B, T, C)
        if self.position_embeddings is not None:
            x = x + self.position_embeddings.weight[:T]
        else:
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
    """Multi-head self-attention through F.scaled_dot_product_attention (flash / memory-efficient kernels)."""

    def __init__(self, cfg):
        super().__init__()
        self.num_heads = cfg.num_heads
        self.dropout_p = cfg.dropout
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
        if unpadded is not None and unpadded.per_sequence_attention and not eager:
            return self.dropout(self.dense(self._attend_each_sequence(self.qkv(x), unpadded.lengths, dropout_p))), None
        (B, T), C = (x.shape[:2] if unpadded is None else (unpadded.batch_size, unpadded.seq_length)), x.size(-1)
        nh, hs = self.num_heads, C // self.num_heads
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
        if eager:
            y, probs = eager_attention(q, k, v, mask, dropout_p)
        else:
            y, probs = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p), None
        y = y.transpose(1, 2).reshape(B, -1, C)  # (B, T or k, C)
        if unpadded is not None:
            y = unpadded.unpad(y)  # (N, C)
        return self.dropout(self.dense(y)), probs

    def _attend_each_sequence(self, qkv: torch.Tensor, lengths: list[int], dropout_p: float) -> torch.Tensor:
        """Attention within each sequence of packed real tokens, qkv (N, 3C) -> (N, C): no padding and no
        mask. On a CPU this beats one padded, masked batched call (1.6x at batch 16 and width 128, 4x at
        batch 128 and width 768, forward and backward)."""
        C = qkv.size(-1) // 3
        nh, hs = self.num_heads, C // self.num_heads
        outputs = []
        for sequence in qkv.split(lengths):  # (L, 3C)
            q, k, v = sequence.view(1, -1, 3, nh, hs).permute(2, 0, 3, 1, 4)  # (1, nh, L, hs) each
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p)
            outputs.append(y.transpose(1, 2).reshape(-1, C))  # (L, C)
        return torch.cat(outputs)


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
    """One transformer layer: pre-LN x + f(LN x) (the crammed choice), post-LN LN(x + f(x)) (BERT's), or no
    LayerNorm, x + f(x) (norm_scheme=none). rezero and skipinit gate the branches with learned scalars that
    start at 0, x + g·f(x), so the layer starts as the identity; deepnorm up-weights x: LN(α·x + f(x)).
    """

    def __init__(self, cfg):
        super().__init__()
        self.pre_norm = cfg.norm_scheme == "pre"
        no_norm = cfg.norm_scheme == "none"
        self.attention_norm = nn.Identity() if no_norm else nn.LayerNorm(cfg.hidden_size, eps=cfg.norm_eps)
        self.attention = SelfAttention(cfg)
        self.ffn_norm = nn.Identity() if no_norm else nn.LayerNorm(cfg.hidden_size, eps=cfg.norm_eps)
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


class EncoderStates(NamedTuple):
    """Every layer's output, for inspection (transformers' output_hidden_states / output_attentions)."""

    hidden_states: tuple[torch.Tensor, ...]  # embeddings, then each layer: num_layers + 1 of (B, T, C); the last normed
    attentions: tuple[torch.Tensor, ...] | None  # each layer's probabilities (B, nh, T, T), if asked for


class Encoder(nn.Module):
    """Token ids (B, T) to hidden states; `attention_mask` (B, T) is 1 for real tokens, 0 for padding."""

    def __init__(self, cfg, vocab_size: int):
        super().__init__()
        self.embeddings = Embeddings(cfg, vocab_size)
        self.layer = nn.ModuleList(Layer(cfg) for _ in range(cfg.num_layers))
        self.final_norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.norm_eps) if cfg.final_norm else nn.Identity()
        # Layers that do not run (their input passes through): set by training techniques that shrink the
        # depth (progressive layer dropping, progressive stacking); empty otherwise and in every export.
        self.skip_layers: frozenset[int] = frozenset()
        # transformers' gradient_checkpointing_enable() sets these two: recompute each layer in backward.
        self.gradient_checkpointing = False
        self._gradient_checkpointing_func = None

    def forward(self, input_ids, attention_mask=None, positions=None) -> torch.Tensor:
        """Hidden states (B, T, C), or (B, k, C) at positions (B, k) only: then the last layer computes its
        queries and feed-forward for those rows alone (sparse prediction needs no other output).

        Padding costs no compute: with an attention_mask the batch runs unpadded (see _unpadded) and the
        padded positions of the output are zeros.
        """
        mask, unpadded = self._key_mask(attention_mask), self._unpadded(attention_mask, positions)
        x = self.embeddings(input_ids, unpadded)  # (B, T, C), or (N, C)
        running = [layer for index, layer in enumerate(self.layer) if index not in self.skip_layers]
        for layer in running[:-1]:
            x, _ = self._run(layer, x, mask, None, False, unpadded)
        if running:
            x, _ = self._run(running[-1], x, mask, positions, False, unpadded)  # (B, T or k, C), or (N, C)
        elif positions is not None:
            x = gather_rows(x, positions)  # (B, k, C)
        return self._padded(self.final_norm(x), unpadded)

    def states(self, input_ids, attention_mask=None, eager: bool = False) -> EncoderStates:
        """The same computation as forward (all positions, every layer: skip_layers is for training),
        keeping every layer's output, and each layer's attention probabilities when `eager`."""
        mask, unpadded = self._key_mask(attention_mask), self._unpadded(attention_mask, None)
        hidden, attentions = [self.embeddings(input_ids, unpadded)], []
        for layer in self.layer:
            x, probs = self._run(layer, hidden[-1], mask, None, eager, unpadded)
            hidden.append(x)
            attentions.append(probs)
        hidden[-1] = self.final_norm(hidden[-1])
        return EncoderStates(tuple(self._padded(x, unpadded) for x in hidden),
                             tuple(attentions) if eager else None)

    @staticmethod
    def _key_mask(attention_mask):
        # Padding is masked out as keys; padded query rows still compute (no NaN) and are ignored downstream.
        return None if attention_mask is None else attention_mask.bool()[:, None, None, :]  # (B, 1, 1, T)

    @staticmethod
    def _unpadded(attention_mask, positions) -> Unpadded | None:
        """Run a padded batch as its real tokens only (fine-tuning batches padded to their longest example
        are about a third padding on RTE): embeddings, norms, projections and feed-forward on (N, C).

        None (run padded) without a mask (packed pretraining), on the sparse-prediction path, and under
        torch.compile, where N, known only from the data, would break the graph.
        """
        if attention_mask is None or positions is not None or torch.compiler.is_compiling():
            return None
        return Unpadded.from_mask(attention_mask)

    @staticmethod
    def _padded(x, unpadded):
        return x if unpadded is None else unpadded.pad(x)  # (N, C) -> (B, T, C)

    def _run(self, layer, x, mask, positions=None, eager=False, unpadded=None):
        if self.gradient_checkpointing and self.training:
            return self._gradient_checkpointing_func(layer.__call__, x, mask, positions, eager, unpadded)
        return layer(x, mask, positions, eager, unpadded)


class MaskedLMHead(nn.Module):
    """Optional BERT transform (dense, GELU, LayerNorm), then the decoder tied to the token embedding."""

    def __init__(self, cfg, vocab_size: int):
        super().__init__()
        self.transform = nn.Identity()
        if cfg.head_transform:
            self.transform = nn.Sequential(OrderedDict(
                dense=nn.Linear(cfg.hidden_size, cfg.hidden_size, bias=cfg.bias),
                act=nn.GELU(),
                LayerNorm=nn.LayerNorm(cfg.hidden_size, eps=cfg.norm_eps),
            ))
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


class Output(NamedTuple):
    """A NamedTuple (not a dataclass) so `torch.compile(fullgraph=True)` returns it without a graph break."""

    loss: torch.Tensor | None
    logits: torch.Tensor


class CrammedForMaskedLM(nn.Module):
    """Encoder + MLM head. With sparse prediction the decoder and loss run on `masked_positions` only."""

    def __init__(self, cfg, vocab_size: int):
        super().__init__()
        self.config, self.vocab_size = cfg, vocab_size
        self.bert = Encoder(cfg, vocab_size)
        self.cls = MaskedLMHead(cfg, vocab_size)

    def forward(self, input_ids, labels=None, masked_positions=None, attention_mask=None) -> Output:
        """input_ids, labels (B, T), labels -100 where nothing is predicted; masked_positions (B, k), sorted.

        logits are (B, k, V) on the sparse path, (B, T, V) otherwise; loss is the mean cross-entropy over
        labels != -100 (None without labels).
        """
        positions = masked_positions if self.config.sparse_prediction else None
        # k is the same for every row, so all shapes are static (compiles with fullgraph=True).
        x = self.bert(input_ids, attention_mask, positions)  # (B, k or T, C)
        if positions is not None and labels is not None:
            labels = labels.gather(1, positions)  # (B, k)
        logits = self.cls(x, self.bert.embeddings.word_embeddings.weight)  # (B, k or T, V)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(), ignore_index=-100)
        return Output(loss, logits)


class CrammedForSequenceClassification(nn.Module):
    """Encoder + [CLS] classification head; cross-entropy, or MSE regression when num_labels == 1 (STS-B)."""

    def __init__(self, cfg, vocab_size: int, num_labels: int):
        super().__init__()
        self.config, self.vocab_size, self.num_labels = cfg, vocab_size, num_labels
        self.bert = Encoder(cfg, vocab_size)
        self.head = ClassificationHead(cfg, num_labels)

    def forward(self, input_ids, attention_mask=None, labels=None) -> Output:
        """input_ids, attention_mask (B, T); labels (B,) class ids, or float targets when num_labels == 1."""
        logits = self.head(self.bert(input_ids, attention_mask))  # (B, num_labels)
        loss = None
        if labels is not None:
            if self.num_labels == 1:
                loss = F.mse_loss(logits.squeeze(-1).float(), labels.float())
            else:
                loss = F.cross_entropy(logits.float(), labels)
        return Output(loss, logits)


SMALL_INIT = 1e-4  # init_scheme=small: embeddings from U(-1e-4, 1e-4)


@torch.no_grad()
def init_module(module: nn.Module, cfg) -> None:
    """Initialize one module's own parameters (N = num_layers): zero biases, unit norms, zero residual gates
    (rezero, skipinit), the position scale at 1/sqrt(hidden_size) (the embeddings' scale), and Linear and
    Embedding weights N(0, init_std) (heads always), except:

    scaled: attention and FFN output projections N(0, init_std / sqrt(2N)), as GPT-2.
    small: embeddings (tokens, learned positions) U(-1e-4, 1e-4), the position scale 1e-4: the embedding
        LayerNorm brings them to unit scale, and their direction moves fast from so close to 0 (BlinkDL's
        SmallInitEmb, used in RWKV).
    tfixup (Huang et al. 2020), its encoder rule: branch matrices xavier-uniform, the value, attention output
        and FFN matrices times 0.67·N^-1/4; embeddings N(0, hidden_size^-1/2). (Its (9N)^-1/4 on the input
        embeddings comes with a decoder; here the embedding LayerNorm would undo it.)
    deepnorm (Wang et al. 2022): branch matrices xavier-normal, the value, attention output and FFN matrices
        with gain β = (8N)^-1/4, its encoder-only value (α: see Layer).
    A fused matrix (qkv; GLU's gate and value) is initialized as its separate matrices (see BranchLinear).

    `init_weights` applies it bottom-up; transformers applies it (as `_init_weights`) in the same order to
    an exported model, so both draw the same weights from the same seed.
    """
    scheme, N = cfg.init_scheme, cfg.num_layers
    if isinstance(module, BranchLinear) and scheme in ("tfixup", "deepnorm"):
        for weight, on_value_path in zip(module.weight.chunk(len(module.value_path)), module.value_path):
            if scheme == "tfixup":
                nn.init.xavier_uniform_(weight, gain=0.67 * N**-0.25 if on_value_path else 1.0)
            else:
                nn.init.xavier_normal_(weight, gain=(8 * N) ** -0.25 if on_value_path else 1.0)
    elif isinstance(module, nn.Embedding) and scheme == "small":
        nn.init.uniform_(module.weight, -SMALL_INIT, SMALL_INIT)
    elif isinstance(module, nn.Embedding) and scheme == "tfixup":
        nn.init.normal_(module.weight, mean=0.0, std=cfg.hidden_size**-0.5)
    elif isinstance(module, (nn.Linear, nn.Embedding)):
        scaled = isinstance(module, ResidualOutput) and scheme == "scaled"
        nn.init.normal_(module.weight, mean=0.0, std=cfg.init_std / (math.sqrt(2 * N) if scaled else 1))
    if isinstance(module, (nn.Linear, nn.LayerNorm, MaskedLMHead)) and module.bias is not None:
        nn.init.zeros_(module.bias)
    if isinstance(module, nn.LayerNorm):
        nn.init.ones_(module.weight)
    if isinstance(module, Embeddings) and module.position_embeddings is None:
        nn.init.constant_(module.position_scale, SMALL_INIT if scheme == "small" else cfg.hidden_size**-0.5)
    if isinstance(module, Layer) and module.residual_gate is not None:
        nn.init.zeros_(module.residual_gate)


def init_weights(model: nn.Module, cfg) -> None:
    """Initialize every module, children before parents (the order of nn.Module.apply and transformers)."""
    model.apply(lambda module: init_module(module, cfg))
