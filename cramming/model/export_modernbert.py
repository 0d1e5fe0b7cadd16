"""A model of ModernBERT's layout as transformers' own ModernBertForMaskedLM or
ModernBertForSequenceClassification (cramming.model.export builds it): its config keys from our arch keys,
its weight names from ours.

What ModernBERT computes, and so what a layout must be to export this way (`is_modernbert_layout`): pre-LN
layers, the first without an attention LayerNorm, a final LayerNorm, the GELU-gated FFN (its first half
activated, times the second), rotary positions, the MLM head's dense + GELU + LayerNorm, and the
classifier's (dense + GELU + LayerNorm on the pooled state). One `bias` for every Linear (its attention_bias,
mlp_bias and classifier_bias), LayerNorm and decoder biases, the attention pattern, the thetas, pooling,
dropout and sparse prediction map onto its keys. No residual gates or DeepNorm α: those it lacks.
"""

import torch
from transformers import ModernBertConfig

from cramming.data.vocab import CLS_ID, PAD_ID, SEP_ID

from .crammed_bert import at_native_defaults, never_special
from .layers import attends_globally

def is_modernbert_layout(cfg) -> bool:
    """Whether the architecture is exactly what transformers' ModernBERT computes."""
    return (
        at_native_defaults(cfg)
        and cfg.norm_scheme == "pre"
        and not cfg.first_layer_attention_norm
        and cfg.final_norm
        and cfg.ffn == "glu"
        and cfg.positions == "rope"
        and cfg.head_transform
        and cfg.classifier_head == "transform"
        and cfg.init_scheme not in ("skipinit", "deepnorm")  # (rezero and tfixup need norm_scheme=none)
    )


def modernbert_config(model) -> ModernBertConfig:
    """The ModernBertConfig of our masked-LM or classifier (num_labels: set by the export)."""
    cfg = model.config
    return ModernBertConfig(
        vocab_size=model.vocab_size,
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size // 2,  # ModernBERT names the width of one GLU half
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        hidden_activation="gelu",
        max_position_embeddings=cfg.max_position_embeddings,
        initializer_range=cfg.init_std,
        norm_eps=cfg.norm_eps,
        norm_bias=cfg.norm_bias,
        pad_token_id=PAD_ID, bos_token_id=CLS_ID, cls_token_id=CLS_ID, eos_token_id=SEP_ID, sep_token_id=SEP_ID,
        attention_bias=cfg.bias,
        mlp_bias=cfg.bias,
        classifier_bias=cfg.bias,
        decoder_bias=True,  # always: it keeps the special tokens out of the predictions (modernbert_state)
        layer_types=["full_attention" if attends_globally(cfg, index) else "sliding_attention"
                     for index in range(cfg.num_layers)],
        local_attention=cfg.local_attention,
        rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": cfg.global_rope_theta},
                         "sliding_attention": {"rope_type": "default", "rope_theta": cfg.local_rope_theta}},
        embedding_dropout=cfg.dropout,
        attention_dropout=cfg.dropout,
        mlp_dropout=cfg.dropout,
        classifier_dropout=cfg.dropout,
        classifier_pooling=cfg.classifier_pooling,
        classifier_activation="gelu",
        sparse_prediction=cfg.sparse_prediction,
        tie_word_embeddings=True,
    )


# our name -> ModernBERT's, within the encoder, in each layer, and in the heads
_ENCODER = {"embeddings.word_embeddings": "embeddings.tok_embeddings",
            "embeddings.LayerNorm": "embeddings.norm", "final_norm": "final_norm"}
_LAYER = {"attention_norm": "attn_norm", "attention.qkv": "attn.Wqkv", "attention.dense": "attn.Wo",
          "ffn_norm": "mlp_norm", "ffn.intermediate": "mlp.Wi", "ffn.output": "mlp.Wo"}
_MLM_HEAD = {"cls.transform.dense": "head.dense", "cls.transform.LayerNorm": "head.norm"}
_CLASSIFIER_HEAD = {"head.dense": "head.dense", "head.norm": "head.norm", "head.classifier": "classifier"}


def modernbert_state(model, is_mlm: bool) -> dict[str, torch.Tensor]:
    """Our state dict under ModernBERT's names (qkv and the GLU's two halves are fused in both)."""
    renames = {f"bert.{ours}": f"model.{theirs}" for ours, theirs in _ENCODER.items()}
    for i in range(model.config.num_layers):
        renames |= {f"bert.layer.{i}.{ours}": f"model.layers.{i}.{theirs}" for ours, theirs in _LAYER.items()}
    renames |= _MLM_HEAD if is_mlm else _CLASSIFIER_HEAD
    ours, state = model.state_dict(), {}
    if is_mlm:
        state["decoder.weight"] = ours["bert.embeddings.word_embeddings.weight"]  # tied
        # ours, or zeros where ours has none; the special tokens' at the lowest float, so that predictions (a
        # fill-mask pipeline) never propose one, as our model's own never do
        bias = ours.pop("cls.bias", torch.zeros(model.vocab_size))
        state["decoder.bias"] = never_special(bias)
    for name, tensor in ours.items():
        module, _, parameter = name.rpartition(".")
        state[f"{renames[module]}.{parameter}"] = tensor
    return state
