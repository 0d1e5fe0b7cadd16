"""Crammed BERT from the top: its config and what a training step of it costs (FLOPs per token), the encoder,
the masked-LM and classification heads, the models.

The building blocks (embeddings, attention, feed-forward, layer) are in layers.py, the unpadded path
(padded batches run as their real tokens) in unpadded.py, and the initialization in initialization.py. All
four import only torch: the `transformers` export ships these very files as the model's remote code, so an
exported model runs the same forward pass and the same initialization as the one that trained. One concept,
the model read from the top, kept whole so that its forward pass reads in one file.
"""

from collections import OrderedDict
import dataclasses
from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from .layers import Embeddings, Layer, gather_rows, layer_norm
from .unpadded import Unpadded


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
    bias: bool = False  # biases in the encoder's Linears and the heads' transforms (BERT's pooler always has)
    decoder_bias: bool | None = None  # the MLM decoder's bias; None: as `bias` (on where train.unigram_bias is)
    norm_bias: bool = True  # biases (shifts) in every LayerNorm
    # scaled-sinusoidal: fixed sinusoids x one learned scalar | learned: a table | rope: rotary, in attention
    positions: str = "scaled-sinusoidal"
    max_position_embeddings: int = 128  # longest input; also the size of a learned position table
    global_rope_theta: float = 160_000.0  # positions=rope: the rotary base of the global layers
    local_rope_theta: float = 10_000.0  # positions=rope: the rotary base of the sliding-window layers
    # Layer i attends to every token when i % N == 0, the others within a sliding window; 1: all global
    global_attn_every_n_layers: int = 1
    local_attention: int = 128  # the sliding window, in tokens: half of it on each side of the query
    first_layer_attention_norm: bool = True  # false: layer 0 attends to the (normed) embeddings directly
    head_transform: bool = False  # dense + GELU + LayerNorm before the MLM decoder (BERT's, ModernBERT's)
    sparse_prediction: bool = True  # run the decoder and loss on the masked positions only
    # The classifier's head on its pooled state: pooler: BERT's dense + tanh | transform: ModernBERT's
    # dense + GELU + LayerNorm; then dropout and a linear layer
    classifier_head: str = "pooler"
    classifier_pooling: str = "cls"  # cls: the [CLS] position's state | mean: the mean of the real tokens'
    norm_eps: float = 1e-12
    # normal: N(0, init_std) | scaled: residual output projections / sqrt(2L) | small | rezero | skipinit |
    # tfixup | deepnorm: see initialization.init_module (and layers.Layer: the gates of rezero and skipinit,
    # deepnorm's α)
    init_scheme: str = "normal"
    init_std: float = 0.02  # std of every weight that the init_scheme does not set otherwise
    dropout: float = 0.0  # embeddings, attention probs, residual branches, classifier; 0 in pretraining


# The ModelConfig keys the native transformers layouts (BERT, ModernBERT: model/export.py) map into their configs
# or pin, each layout's conditions on them in its is_*_layout.
NATIVE_LAYOUT_KEYS = frozenset({
    "name", "num_layers", "hidden_size", "num_heads", "intermediate_size", "max_position_embeddings", "dropout",
    "init_std", "norm_eps", "norm_scheme", "init_scheme", "ffn", "bias", "decoder_bias", "norm_bias", "positions",
    "global_attn_every_n_layers", "local_attention", "head_transform", "classifier_head", "classifier_pooling",
    "final_norm", "sparse_prediction", "global_rope_theta", "local_rope_theta", "first_layer_attention_norm"})


def at_native_defaults(cfg) -> bool:
    """Whether every ModelConfig key outside NATIVE_LAYOUT_KEYS holds its default: a key added to the model later
    exports as the remote code until the native layouts map it, instead of being dropped from the export."""
    return all(getattr(cfg, field.name) == field.default for field in dataclasses.fields(ModelConfig)
               if field.name not in NATIVE_LAYOUT_KEYS)


def training_flops_per_token(cfg, vocab_size: int, seq_length: int, mlm_rate: float) -> float:
    """FLOPs of one training step (forward + backward = 3 x forward) per input token.

    With sparse prediction the MLM head runs on round(mlm_rate * seq_length) positions of each row only.
    A sliding-window layer counts all T keys per query, as a global one: its window is a mask on the full
    T x T product, which is what scaled_dot_product_attention computes (no kernel here skips masked blocks).
    Rotary positions are elementwise, not counted.
    """
    H, T = cfg.hidden_size, seq_length
    ffn_width = cfg.intermediate_size // 2 if cfg.ffn == "glu" else cfg.intermediate_size
    # qkv, attention output (dense), intermediate, output: multiply-accumulates per token
    layer_macs = 3 * H * H + H * H + H * cfg.intermediate_size + ffn_width * H
    attention_macs = 2 * T * H  # q @ k^T and probs @ v, per query token
    head_macs = (H * H if cfg.head_transform else 0) + H * vocab_size
    predicted_fraction = round(mlm_rate * T) / T if cfg.sparse_prediction else 1.0
    forward_macs = cfg.num_layers * (layer_macs + attention_macs) + predicted_fraction * head_macs
    return 3 * 2 * forward_macs


class EncoderStates(NamedTuple):
    """Every layer's output, for inspection (transformers' output_hidden_states / output_attentions)."""

    hidden_states: tuple[torch.Tensor, ...]  # embeddings, then each layer: num_layers + 1 of (B, T, C); the last normed
    attentions: tuple[torch.Tensor, ...] | None  # each layer's probabilities (B, nh, T, T), if asked for


class Encoder(nn.Module):
    """Token ids (B, T) to hidden states; `attention_mask` (B, T) is 1 for real tokens, 0 for padding."""

    def __init__(self, cfg, vocab_size: int):
        super().__init__()
        self.embeddings = Embeddings(cfg, vocab_size)
        self.layer = nn.ModuleList(Layer(cfg, index) for index in range(cfg.num_layers))
        self.final_norm = layer_norm(cfg) if cfg.final_norm else nn.Identity()
        # Layers that do not run (their input passes through): set by training techniques that shrink the
        # depth (progressive layer dropping, progressive stacking); empty otherwise and in every export.
        self.skip_layers: frozenset[int] = frozenset()
        # False: a masked batch runs at its padded shape, as it does under torch.compile (static shapes, no
        # host sync): what compiled GLUE fine-tuning runs, also when a test runs it eagerly.
        self.unpad = True
        # transformers' gradient_checkpointing_enable() sets these two: recompute each layer in backward.
        self.gradient_checkpointing = False
        self._gradient_checkpointing_func = None

    def forward(self, input_ids, attention_mask=None, positions=None) -> torch.Tensor:
        """Hidden states (B, T, C), or (B, k, C) at positions (B, k) only: then the last layer computes its
        queries and feed-forward for those rows alone (sparse prediction needs no other output).

        Padding costs no compute: with an attention_mask the batch runs unpadded (see _unpadded) and the
        padded positions of the output are zeros.
        """
        mask, unpadded = self._key_mask(attention_mask), self._layout(attention_mask, positions)
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
        mask, unpadded = self._key_mask(attention_mask), self._layout(attention_mask, None)
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

    def _layout(self, attention_mask, positions) -> Unpadded | None:
        return self._unpadded(attention_mask, positions) if self.unpad else None

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


def has_decoder_bias(cfg) -> bool:
    return cfg.bias if cfg.decoder_bias is None else cfg.decoder_bias


# [PAD] [UNK] [CLS] [SEP] [MASK]: ids 0 to 4 in every tokenizer of ours (cramming/data/vocab.py, which this file,
# shipped as the export's remote code, cannot import). No special token is ever a label.
SPECIAL_IDS = 5


def never_special(logits: torch.Tensor) -> torch.Tensor:
    """`logits` (..., V) with the special tokens' at the lowest value their dtype holds: a prediction never
    proposes one (a young model's top guess for [MASK] was [MASK] itself, its embedding being closest)."""
    special = torch.arange(SPECIAL_IDS, device=logits.device)
    return logits.index_fill(-1, special, torch.finfo(logits.dtype).min)


class MaskedLMHead(nn.Module):
    """Optional transform (dense, GELU, LayerNorm: BERT's and ModernBERT's), then the decoder tied to the
    token embedding."""

    def __init__(self, cfg, vocab_size: int):
        super().__init__()
        self.transform = nn.Identity()
        if cfg.head_transform:
            self.transform = nn.Sequential(OrderedDict(
                dense=nn.Linear(cfg.hidden_size, cfg.hidden_size, bias=cfg.bias),
                act=nn.GELU(),
                LayerNorm=layer_norm(cfg),
            ))
        self.bias = nn.Parameter(torch.zeros(vocab_size)) if has_decoder_bias(cfg) else None

    def forward(self, x: torch.Tensor, decoder_weight: torch.Tensor) -> torch.Tensor:
        """x (B, T, C) and the embedding matrix (V, C) to logits (B, T, V)."""
        return F.linear(self.transform(x), decoder_weight, self.bias)


class ClassificationHead(nn.Module):
    """The pooled state (the [CLS] position's, or the mean of the real tokens'), BERT's pooler (dense + tanh)
    or ModernBERT's head (dense + GELU + LayerNorm), dropout, then a linear classifier.

    The same computation serves local and exported checkpoints (a native export puts these weights into
    the native class's same head), so a GLUE score never depends on the code path.
    """

    def __init__(self, cfg, num_labels: int):
        super().__init__()
        self.mean_pooling = cfg.classifier_pooling == "mean"
        transform = cfg.classifier_head == "transform"
        self.dense = nn.Linear(cfg.hidden_size, cfg.hidden_size, bias=cfg.bias if transform else True)
        self.norm = layer_norm(cfg) if transform else None
        self.dropout = nn.Dropout(cfg.dropout)
        self.classifier = nn.Linear(cfg.hidden_size, num_labels)

    def forward(self, hidden: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """hidden (B, T, C) to logits (B, num_labels); position 0 holds [CLS]; attention_mask (B, T) is 1
        for the real tokens that mean pooling averages."""
        if not self.mean_pooling:
            pooled = hidden[:, 0]  # (B, C)
        elif attention_mask is None:
            pooled = hidden.mean(1)
        else:
            real = attention_mask[:, :, None].to(hidden.dtype)  # (B, T, 1)
            pooled = (hidden * real).sum(1) / real.sum(1)  # (B, C)
        if self.norm is None:
            pooled = torch.tanh(self.dense(pooled))
        else:
            pooled = self.norm(F.gelu(self.dense(pooled)))
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
        labels != -100 (None without labels). A call with neither labels nor masked_positions is a prediction
        (a fill-mask pipeline's): its logits never propose a special token (`never_special`). Training,
        validation and a teacher name their positions, and a scorer reads the head (cramming.eval.masked_lm):
        they see the head's own logits.
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
        elif masked_positions is None:
            logits = never_special(logits)
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
        logits = self.head(self.bert(input_ids, attention_mask), attention_mask)  # (B, num_labels)
        loss = None
        if labels is not None:
            if self.num_labels == 1:
                loss = F.mse_loss(logits.squeeze(-1).float(), labels.float())
            else:
                loss = F.cross_entropy(logits.float(), labels)
        return Output(loss, logits)


# Which weights are "the encoder's matrices": what sparsity prunes, Muon orthogonalizes and fp8 converts.
# One definition, so the techniques that act on them agree.
ENCODER_LAYERS = "bert.layer."  # the prefix of every parameter and module inside the encoder's layers


def in_encoder_layers(name: str) -> bool:
    """Whether a parameter or module of the masked-LM model (named as named_parameters/named_modules do)
    sits inside one of the encoder's layers; embeddings, norms outside layers and heads do not."""
    return name.startswith(ENCODER_LAYERS)


def encoder_matrices(model: nn.Module) -> dict[str, nn.Parameter]:
    """The 2-D weights inside the encoder's layers (attention and feed-forward), by name."""
    return {name: p for name, p in model.named_parameters() if p.dim() == 2 and in_encoder_layers(name)}
