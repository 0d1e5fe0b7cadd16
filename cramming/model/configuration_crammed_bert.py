"""`transformers` config of an exported crammed model: the keys of ModelConfig plus vocab_size.

Part of the export's remote code (`trust_remote_code=True`): imports transformers and the model's files only.
"""

import dataclasses

from transformers import PretrainedConfig

from .crammed_bert import ModelConfig
# transformers 5.0 copies from a local export folder only the files that this file imports, not the files
# those import (fixed by huggingface/transformers#46022): so every model file it needs is imported here.
from .layers import Layer  # noqa: F401
from .unpadded import Unpadded  # noqa: F401

ARCH_KEYS = {field.name: field.default for field in dataclasses.fields(ModelConfig) if field.name != "name"}


class CrammedBertConfig(PretrainedConfig):
    model_type = "crammed_bert"
    attribute_map = {
        "num_hidden_layers": "num_layers",
        "num_attention_heads": "num_heads",
        "layer_norm_eps": "norm_eps",
        "initializer_range": "init_std",
    }

    def __init__(self, vocab_size=32768, pad_token_id=0, **kwargs):
        """Every ModelConfig key (its default where absent), so the model modules read the same names."""
        self.vocab_size = vocab_size
        for key, default in ARCH_KEYS.items():
            setattr(self, key, kwargs.pop(key, default))
        super().__init__(pad_token_id=pad_token_id, **kwargs)
