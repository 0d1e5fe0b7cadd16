"""`transformers` config of an exported crammed model: the arch keys of ModelConfig plus vocab_size.

Imports only transformers: the export copies this file as remote code (`trust_remote_code=True`).
"""

from transformers import PretrainedConfig


class CrammedBertConfig(PretrainedConfig):
    model_type = "crammed_bert"
    attribute_map = {
        "num_hidden_layers": "num_layers",
        "num_attention_heads": "num_heads",
        "layer_norm_eps": "norm_eps",
        "initializer_range": "init_std",
    }

    def __init__(
        self,
        vocab_size=32768,
        num_layers=16,
        hidden_size=768,
        num_heads=12,
        intermediate_size=3072,
        ffn="glu",
        norm_scheme="pre",
        final_norm=True,
        bias=False,
        positions="scaled-sinusoidal",
        max_position_embeddings=128,
        head_transform=False,
        sparse_prediction=True,
        norm_eps=1e-12,
        init_scheme="normal",
        init_std=0.02,
        dropout=0.0,
        pad_token_id=0,
        **kwargs,
    ):
        self.vocab_size = vocab_size
        self.num_layers = num_layers
        self.hidden_size = hidden_size
        self.num_heads = num_heads
        self.intermediate_size = intermediate_size
        self.ffn = ffn
        self.norm_scheme = norm_scheme
        self.final_norm = final_norm
        self.bias = bias
        self.positions = positions
        self.max_position_embeddings = max_position_embeddings
        self.head_transform = head_transform
        self.sparse_prediction = sparse_prediction
        self.norm_eps = norm_eps
        self.init_scheme = init_scheme
        self.init_std = init_std
        self.dropout = dropout
        super().__init__(pad_token_id=pad_token_id, **kwargs)
