"""The calculator's FLOPs and parameters agree with the model's own FLOP count and its real weights."""

from dataclasses import replace

import pytest
from torch import nn

from cramming.calculator.candidates import evaluate, shapes
from cramming.calculator.loss_model import SizeRule
from cramming.calculator.speed_model import (SpeedModel, V100_REFERENCE, non_embedding_flops_per_token,
                                             non_embedding_parameters)
from cramming.model import ModelConfig, build_mlm_model, training_flops_per_token

BASE = ModelConfig(name="candidate")


@pytest.mark.parametrize("layers,hidden", [(1, 64), (4, 128), (16, 768)])
def test_layers_plus_head_is_the_models_count(layers, hidden):
    arch = replace(BASE, num_layers=layers, hidden_size=hidden, num_heads=hidden // 64,
                   intermediate_size=4 * hidden)
    total = training_flops_per_token(arch, 32768, 128, 0.25)
    layers_only = non_embedding_flops_per_token(arch, 32768, 128, 0.25)
    head = 6 * round(0.25 * 128) / 128 * hidden * 32768  # sparse decoder on the masked positions
    assert layers_only + head == pytest.approx(total, rel=1e-12)
    # GLU: 4H² attention projections, 4H² + 2H² FFN; 2·T·H attention scores and mixing
    assert layers_only == pytest.approx(6 * layers * (10 * hidden**2 + 2 * 128 * hidden))


def test_parameters_are_the_encoder_layers_linear_weights():
    arch = replace(BASE, num_layers=3, hidden_size=64, num_heads=2, intermediate_size=256)
    model = build_mlm_model(arch, 300)
    layer_weights = sum(m.weight.numel() for name, m in model.named_modules()
                        if isinstance(m, nn.Linear) and ".layer." in f".{name}.")
    assert layer_weights > 0
    assert non_embedding_parameters(arch) == layer_weights
    assert non_embedding_parameters(BASE) == 16 * 10 * 768**2  # crammed-bert: 94.4M


def test_candidate_flops_are_tokens_times_model_flops():
    speed = SpeedModel("v100", V100_REFERENCE, "reference")
    rule = SizeRule(params=94e6, compute=1e19)
    for arch in shapes(BASE, [2, 8], [128, 512], head_size=64, ffn_ratio=4):
        c = evaluate(arch, speed, 3600.0, 64, 32768, 128, 0.25, rule, None, 0.05)
        assert c.tokens == pytest.approx(c.tokens_per_s * 3600.0)
        assert c.flops == pytest.approx(c.tokens * training_flops_per_token(arch, 32768, 128, 0.25))
        assert c.heads == arch.hidden_size // 64 and c.ffn == 4 * arch.hidden_size
        assert c.loss is None
