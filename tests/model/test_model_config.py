"""Arch configs: parameter counts of the two reference layouts, and every bad key rejected in one line."""

import dataclasses

import pytest
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException

from cramming.errors import CrammingError
from cramming.model import ModelConfig, build_mlm_model
from cramming.model.config import as_model_config

from .conftest import CONFIGS, arch_config


def count(model) -> int:
    return sum(p.numel() for p in model.parameters())


def test_crammed_bert_parameter_count():
    model = build_mlm_model(arch_config("crammed-bert"), vocab_size=32768)
    assert count(model) == 119_589_889  # 16 x 5,901,312 per layer + 25,165,824 tied embedding + norms + scale
    assert model.bert.embeddings.word_embeddings.weight.numel() == 25_165_824


def test_bert_base_parameter_count():
    # transformers' BertForMaskedLM at the same size has 109,514,298: ours lacks the 2 x 768 token types.
    assert count(build_mlm_model(arch_config("bert-base"), vocab_size=30522)) == 109_512_762


@pytest.mark.parametrize("name, layers", [("crammed-bert-tiny", 2), ("bert-base-tiny", 2), ("modern-bert-tiny", 3)])
def test_tiny_configs_build(name, layers):
    cfg = arch_config(name)
    assert cfg.name == name and cfg.num_layers == layers
    assert count(build_mlm_model(cfg, vocab_size=256)) < 1_000_000


def test_unknown_key_rejected():
    with pytest.raises(CrammingError, match="unknown arch key.*: heads"):
        as_model_config({**dataclasses.asdict(ModelConfig(name="x")), "heads": 4})
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        with pytest.raises(ConfigCompositionException):
            compose(overrides=["+arch=crammed-bert", "arch.heads=4"])
        appended = compose(overrides=["+arch=crammed-bert", "+arch.heads=4"]).arch
    with pytest.raises(CrammingError, match="unknown arch key.*: heads"):
        build_mlm_model(appended, vocab_size=256)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"hidden_size": 100, "num_heads": 12}, "divisible by arch.num_heads"),
        ({"ffn": "swiglu"}, "arch.ffn must be one of"),
        ({"norm_scheme": "sandwich"}, "arch.norm_scheme must be one of"),
        ({"positions": "rotary"}, "arch.positions must be one of"),
        ({"init_scheme": "xavier"}, "arch.init_scheme must be one of"),
        ({"init_scheme": "rezero"}, "init_scheme=rezero trains without LayerNorms: set arch.norm_scheme=none"),
        ({"init_scheme": "tfixup", "norm_scheme": "post"}, "init_scheme=tfixup .*: set arch.norm_scheme=none"),
        ({"init_scheme": "deepnorm"}, "init_scheme=deepnorm .* post-LN layers: set arch.norm_scheme=post"),
        ({"init_scheme": "deepnorm", "norm_scheme": "none"}, "set arch.norm_scheme=post"),
        ({"num_layers": 0}, "arch.num_layers must be a positive integer"),
        ({"intermediate_size": 301}, "must be even"),
        ({"dropout": 1.0}, "arch.dropout must be in"),
        ({"classifier_head": "mlp"}, "arch.classifier_head must be one of pooler, transform"),
        ({"classifier_pooling": "max"}, "arch.classifier_pooling must be one of cls, mean"),
        ({"positions": "rope", "hidden_size": 60}, "positions=rope .* the head size \\(15\\) must be even"),
        ({"global_attn_every_n_layers": 0}, "arch.global_attn_every_n_layers must be a positive integer"),
        ({"global_attn_every_n_layers": 2, "local_attention": 7}, "arch.local_attention \\(7\\) must be even"),
        ({"positions": "rope", "local_rope_theta": 0.5}, "arch.local_rope_theta must be a finite number greater "
                                                          "than 1, got 0.5"),
        ({"global_rope_theta": 5e5}, "arch.global_rope_theta=500000.0 has no effect without arch.positions=rope"),
        ({"local_attention": 64}, "arch.local_attention=64 has no effect without sliding-window layers"),
        ({"positions": "rope", "local_rope_theta": 5e4}, "local_rope_theta=50000.0 has no effect without"),
        ({"first_layer_attention_norm": False, "norm_scheme": "post"}, "is for pre-LN layers.*norm_scheme=pre"),
    ],
)
def test_invalid_values_rejected(change, message):
    tiny = ModelConfig(name="x", hidden_size=64, num_heads=4, intermediate_size=256)
    cfg = dataclasses.replace(tiny, **change)
    with pytest.raises(CrammingError, match=message) as error:
        build_mlm_model(cfg, vocab_size=256)
    assert "\n" not in str(error.value)


def test_invalid_vocab_size_rejected():
    with pytest.raises(CrammingError, match="vocab_size must be a positive integer"):
        build_mlm_model(arch_config("crammed-bert-tiny"), vocab_size=0)
