"""Export a checkpoint directory to one that `transformers` loads.

A layout that a native transformers class computes exports as that class, loaded with no remote code: the
BERT layout (post-LN, GELU FFN, biases, learned positions, head transform, no final norm) as
BertForMaskedLM / BertForSequenceClassification, ModernBERT's (export_modernbert.py) as
ModernBertForMaskedLM / ModernBertForSequenceClassification. Any other layout, crammed-bert included, is
written as remote code: the training model's own files (crammed_bert.py, layers.py, unpadded.py,
initialization.py) and its transformers wrappers next to config.json, loaded with `trust_remote_code=True`.
"""

import json
import os
import shutil
from pathlib import Path

import torch
from transformers import (
    BertConfig,
    BertForMaskedLM,
    BertForSequenceClassification,
    ModernBertForMaskedLM,
    ModernBertForSequenceClassification,
)

from ..data.tokenizer import as_transformers_tokenizer
from ..errors import CrammingError
from ..files import share_weights
from . import configuration_crammed_bert, crammed_bert, initialization, layers, modeling_crammed_bert
from . import unpadded
from .checkpoint import load_pretrained
from .configuration_crammed_bert import CrammedBertConfig
from .crammed_bert import CrammedForMaskedLM, at_native_defaults, has_decoder_bias, never_special
from .export_modernbert import is_modernbert_layout, modernbert_config, modernbert_state
from .layers import has_local_layers

# torch + transformers only; the model's files import one another relatively (from .layers import ...)
REMOTE_CODE = (modeling_crammed_bert, configuration_crammed_bert, crammed_bert, layers, unpadded,
               initialization)


def export_to_transformers(directory_in: str | os.PathLike, directory_out: str | os.PathLike) -> None:
    """Write the checkpoint in `directory_in` (masked-LM or classifier) and its tokenizer to `directory_out`
    in a layout `transformers` loads (see the module docstring)."""
    if Path(directory_out).resolve() == Path(directory_in).resolve():
        raise CrammingError(f"export into the checkpoint directory itself ({directory_in}): choose another")
    model, tokenizer = load_pretrained(directory_in)
    # Our tokenizer rebuilt from its tokenizer.json alone: whatever else the checkpoint's tokenizer files say
    # (an auto_map to someone's remote code, say) is not carried into the export.
    tokenizer = as_transformers_tokenizer(tokenizer.backend_tokenizer, tokenizer.model_max_length)
    is_mlm = isinstance(model, CrammedForMaskedLM)
    if is_bert_layout(model.config):
        classes = BertForMaskedLM, BertForSequenceClassification
        native = _as_native(model, _bert_config(model), classes, _native_bert_state(model, is_mlm))
        native.save_pretrained(directory_out)
    elif is_modernbert_layout(model.config):
        classes = ModernBertForMaskedLM, ModernBertForSequenceClassification
        native = _as_native(model, modernbert_config(model), classes, modernbert_state(model, is_mlm))
        native.save_pretrained(directory_out)
    else:
        _save_remote_code(model, directory_out)
    tokenizer.save_pretrained(directory_out)
    _name_a_tokenizer_class_every_version_has(Path(directory_out) / "tokenizer_config.json")
    share_weights(Path(directory_out))


def _name_a_tokenizer_class_every_version_has(tokenizer_config: Path) -> None:
    """transformers 5 records its tokenizer as `TokenizersBackend`, a class 4.x lacks; both load the same
    tokenizer.json as `PreTrainedTokenizerFast`."""
    settings = json.loads(tokenizer_config.read_text())
    settings["tokenizer_class"] = "PreTrainedTokenizerFast"
    tokenizer_config.write_text(json.dumps(settings, indent=2) + "\n")



def is_bert_layout(cfg) -> bool:
    """Whether the architecture is exactly what transformers' BERT computes."""
    return (
        at_native_defaults(cfg)  # sparse_prediction only changes which positions training scores; rope's keys and
        # first_layer_attention_norm mean nothing with learned positions and post-norm
        and cfg.norm_scheme == "post"
        and cfg.init_scheme not in ("skipinit", "deepnorm")  # BERT has neither residual gates nor DeepNorm's α
        and cfg.ffn == "gelu"
        and cfg.bias
        and has_decoder_bias(cfg)
        and cfg.norm_bias
        and cfg.positions == "learned"
        and not has_local_layers(cfg)
        and cfg.head_transform
        and cfg.classifier_head == "pooler"
        and cfg.classifier_pooling == "cls"
        and not cfg.final_norm
    )


def _as_native(model, config, classes, state: dict[str, torch.Tensor]):
    """The native class, masked-LM or classifier (`classes`), of `config` holding `state`, our weights."""
    if isinstance(model, CrammedForMaskedLM):
        native = classes[0](config)
    else:
        config.num_labels = model.num_labels
        config.problem_type = "regression" if model.num_labels == 1 else "single_label_classification"
        native = classes[1](config)
    native.load_state_dict(state, strict=True)
    return native


def _bert_config(model) -> BertConfig:
    cfg = model.config
    return BertConfig(
        vocab_size=model.vocab_size,
        hidden_size=cfg.hidden_size,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        intermediate_size=cfg.intermediate_size,
        hidden_act="gelu",
        hidden_dropout_prob=cfg.dropout,
        attention_probs_dropout_prob=cfg.dropout,
        max_position_embeddings=cfg.max_position_embeddings,
        type_vocab_size=2,  # both rows zero: segment ids change nothing, as in our model
        initializer_range=cfg.init_std,
        layer_norm_eps=cfg.norm_eps,
        pad_token_id=0,
    )


def _native_bert_state(model, is_mlm: bool) -> dict[str, torch.Tensor]:
    """Our state dict under transformers' BERT names (the fused qkv split into query, key, value)."""
    ours = model.state_dict()
    H = model.config.hidden_size
    state = {
        "bert.embeddings.word_embeddings.weight": ours["bert.embeddings.word_embeddings.weight"],
        "bert.embeddings.position_embeddings.weight": ours["bert.embeddings.position_embeddings.weight"],
        "bert.embeddings.token_type_embeddings.weight": torch.zeros(2, H),
        "bert.embeddings.LayerNorm.weight": ours["bert.embeddings.LayerNorm.weight"],
        "bert.embeddings.LayerNorm.bias": ours["bert.embeddings.LayerNorm.bias"],
    }
    renames = {
        "attention.dense": "attention.output.dense",
        "attention_norm": "attention.output.LayerNorm",
        "ffn.intermediate": "intermediate.dense",
        "ffn.output": "output.dense",
        "ffn_norm": "output.LayerNorm",
    }
    for i in range(model.config.num_layers):
        src, dst = f"bert.layer.{i}.", f"bert.encoder.layer.{i}."
        for param in ("weight", "bias"):
            query, key, value = ours[f"{src}attention.qkv.{param}"].split(H)
            state[f"{dst}attention.self.query.{param}"] = query
            state[f"{dst}attention.self.key.{param}"] = key
            state[f"{dst}attention.self.value.{param}"] = value
            for old, new in renames.items():
                state[f"{dst}{new}.{param}"] = ours[f"{src}{old}.{param}"]
    if is_mlm:
        for param in ("weight", "bias"):
            state[f"cls.predictions.transform.dense.{param}"] = ours[f"cls.transform.dense.{param}"]
            state[f"cls.predictions.transform.LayerNorm.{param}"] = ours[f"cls.transform.LayerNorm.{param}"]
        # the special tokens' bias at the lowest float: BertForMaskedLM's predictions never propose one, as ours
        state["cls.predictions.bias"] = state["cls.predictions.decoder.bias"] = never_special(ours["cls.bias"])
        state["cls.predictions.decoder.weight"] = ours["bert.embeddings.word_embeddings.weight"]
    else:
        for param in ("weight", "bias"):
            state[f"bert.pooler.dense.{param}"] = ours[f"head.dense.{param}"]
            state[f"classifier.{param}"] = ours[f"head.classifier.{param}"]
    return state


_AUTO_MAP = {
    "AutoConfig": "configuration_crammed_bert.CrammedBertConfig",
    "AutoModel": "modeling_crammed_bert.CrammedBertModel",
    **{f"AutoModelFor{task}": f"modeling_crammed_bert.CrammedBertFor{task}" for task in (
        "MaskedLM", "SequenceClassification", "TokenClassification", "QuestionAnswering", "MultipleChoice")},
}


def _save_remote_code(model, directory) -> None:
    """Weights and config.json (with auto_map) through transformers, then the model's source beside them."""
    arch = {k: v for k, v in vars(model.config).items() if k != "name"}
    if isinstance(model, CrammedForMaskedLM):
        config = CrammedBertConfig(vocab_size=model.vocab_size, **arch)
        hf_model = modeling_crammed_bert.CrammedBertForMaskedLM(config)
    else:
        config = CrammedBertConfig(vocab_size=model.vocab_size, num_labels=model.num_labels, **arch)
        hf_model = modeling_crammed_bert.CrammedBertForSequenceClassification(config)
    hf_model.crammed.load_state_dict(model.state_dict(), strict=True)
    config.auto_map = _AUTO_MAP
    config.tokenizer_class = "PreTrainedTokenizerFast"  # transformers 4.x pipelines load the tokenizer only then
    hf_model.save_pretrained(directory)
    for module in REMOTE_CODE:
        shutil.copyfile(module.__file__, Path(directory) / Path(module.__file__).name)
