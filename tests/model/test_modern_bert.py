"""arch=modern-bert, ModernBERT's layout: its shape, each of its keys acting on its own in another layout,
local and global attention differing exactly where the window ends, its FLOPs, and old checkpoints (written
before these keys existed) loading as they computed."""

import dataclasses
import json

import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from cramming.errors import CrammingError
from cramming.model import build_classifier, build_mlm_model, training_flops_per_token
from cramming.model.checkpoint import load_pretrained, save_pretrained

from .conftest import arch_config

V = 256


def count(model) -> int:
    return sum(p.numel() for p in model.parameters())


def random_ids(batch_size: int, seq_length: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(5, V, (batch_size, seq_length), generator=torch.Generator().manual_seed(seed))


def test_modern_bert_has_modernbert_bases_shape():
    model = build_mlm_model(arch_config("modern-bert"), vocab_size=32768)
    # 22 x (qkv 3H^2 + out H^2 + Wi 3H^2 + Wo 1.5H^2 + 2 norms of H) - layer 0's attention norm, the tied
    # embedding, embedding and final norms, the head's dense and norm, the decoder bias
    assert count(model) == 136_120_832
    layers = model.bert.layer
    assert [layer.attention.half_window for layer in layers[:7]] == [None, 64, 64, None, 64, 64, None]
    assert [layer.attention.rope_theta for layer in layers[:4]] == [160_000.0, 10_000.0, 10_000.0, 160_000.0]
    assert isinstance(layers[0].attention_norm, nn.Identity)
    assert all(isinstance(layer.attention_norm, nn.LayerNorm) for layer in layers[1:])
    assert all(module.bias is None for module in model.modules() if isinstance(module, (nn.Linear, nn.LayerNorm)))
    assert model.cls.bias.shape == (32768,) and isinstance(model.cls.transform.LayerNorm, nn.LayerNorm)
    embeddings = model.bert.embeddings
    assert embeddings.position_embeddings is None and embeddings.position_scale is None  # positions: in attention
    assert model.bert.layer[0].ffn.intermediate.weight.shape == (2304, 768)  # GeGLU halves of 1152


@pytest.mark.parametrize("override", [
    "positions=rope", "norm_bias=false", "decoder_bias=true", "first_layer_attention_norm=false",
    "head_transform=true", "global_attn_every_n_layers=2",
])
def test_each_key_acts_alone_on_crammed_bert(override):
    """The crammed layout with one of modern-bert's choices: accepted alone, and with the weights the two
    share (moved off their init, so zero biases and unit norms count) it computes other logits."""
    torch.manual_seed(0)
    base = build_mlm_model(arch_config("crammed-bert-tiny"), V).eval()
    changed = build_mlm_model(arch_config("crammed-bert-tiny", override), V).eval()
    with torch.no_grad():
        for parameter in [*base.parameters(), *changed.parameters()]:
            parameter.add_(0.1 * torch.randn_like(parameter))
    shared = {key: value for key, value in base.state_dict().items() if key in changed.state_dict()}
    changed.load_state_dict(shared, strict=False)
    ids = random_ids(2, 128)  # longer than half the 128-token window: a sliding window acts
    with torch.no_grad():
        assert (base(ids).logits - changed(ids).logits).abs().max() > 1e-3


@pytest.mark.parametrize("override", ["classifier_head=transform", "classifier_pooling=mean"])
def test_the_classifier_head_keys_act_alone(override):
    ids, mask = random_ids(2, 40), torch.ones(2, 40, dtype=torch.long)
    mask[1, 25:] = 0
    torch.manual_seed(0)
    base = build_classifier(arch_config("crammed-bert-tiny"), V, num_labels=3).eval()
    changed = build_classifier(arch_config("crammed-bert-tiny", override), V, num_labels=3).eval()
    shared = {key: value for key, value in base.state_dict().items() if key in changed.state_dict()}
    changed.load_state_dict(shared, strict=False)
    with torch.no_grad():
        assert (base(ids, mask).logits - changed(ids, mask).logits).abs().max() > 1e-4


def test_mean_pooling_averages_the_real_tokens_only():
    torch.manual_seed(0)
    classifier = build_classifier(arch_config("modern-bert-tiny", "classifier_pooling=mean"), V, 2).eval()
    ids, mask = random_ids(1, 30), torch.ones(1, 30, dtype=torch.long)
    mask[0, 18:] = 0
    with torch.no_grad():
        padded = classifier(ids, mask).logits
        alone = classifier(ids[:, :18]).logits
    torch.testing.assert_close(padded, alone, rtol=1e-5, atol=1e-6)


def test_local_and_global_attention_differ_exactly_beyond_the_window():
    """modern-bert-tiny: layer 0 global, layers 1 and 2 within 64 tokens each side. At T=512 a local layer
    puts no weight beyond the window and some on every key inside it; the same weights with every layer
    global compute other logits at T=512, and the same ones at T=65, where no key is out of reach."""
    cfg = arch_config("modern-bert-tiny", "global_rope_theta=10000")  # one theta: only the windows differ
    torch.manual_seed(0)
    model = build_mlm_model(cfg, V).eval()
    all_global = build_mlm_model(dataclasses.replace(cfg, global_attn_every_n_layers=1), V).eval()
    all_global.load_state_dict(model.state_dict())  # the window is no parameter: the same weights fit both
    T = 512
    ids = random_ids(2, T)
    distance = (torch.arange(T)[:, None] - torch.arange(T)).abs()
    with torch.no_grad():
        probs = model.bert.states(ids, eager=True).attentions  # each (B, nh, T, T)
        assert (probs[0][..., distance > 64] > 0).all()  # global
        for local in probs[1:]:
            assert (local[..., distance > 64] == 0).all() and (local[..., distance <= 64] > 0).all()
        assert (model(ids).logits - all_global(ids).logits).abs().max() > 1e-3
        short = ids[:, :65]
        torch.testing.assert_close(model(short).logits, all_global(short).logits, rtol=0, atol=0)


def test_flops_count_the_full_product_of_sliding_window_layers():
    """The count is what runs: the eager attention (the full T x T products, masked) and every Linear,
    counted by torch's FlopCounterMode, equal the analytic count at T=512 (a 128-token window)."""
    cfg = dataclasses.replace(arch_config("modern-bert-tiny"), sparse_prediction=False)  # the head everywhere
    model = build_mlm_model(cfg, V).eval()
    B, T = 2, 512
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        hidden = model.bert.states(random_ids(B, T), eager=True).hidden_states[-1]
        model.cls(hidden, model.bert.embeddings.word_embeddings.weight)
    assert counter.get_total_flops() / (B * T) == training_flops_per_token(cfg, V, T, 0.25) / 3
    H, full = 768, arch_config("modern-bert")
    # per layer: qkv 3H^2 + dense H^2 + GeGLU in 3H^2 + out 1.5H^2; attention 2TH; head transform H^2
    per_token = 6 * (22 * (8.5 * H * H + 2 * 512 * H) + 128 / 512 * (H * H + H * 32768))
    assert training_flops_per_token(full, 32768, 512, 0.25) == pytest.approx(per_token)


def test_a_checkpoint_written_before_the_new_keys_loads_as_it_computed(tmp_path, tokenizer):
    torch.manual_seed(0)
    cfg = arch_config("bert-base-tiny")  # with biases: its decoder bias follows `bias`, as it did
    model = build_mlm_model(cfg, len(tokenizer)).eval()
    save_pretrained(model, tmp_path, tokenizer)
    config = json.loads((tmp_path / "config.json").read_text())
    new_keys = ("decoder_bias", "norm_bias", "global_rope_theta", "local_rope_theta", "global_attn_every_n_layers",
                "local_attention", "first_layer_attention_norm", "classifier_head", "classifier_pooling")
    config["arch"] = {key: value for key, value in config["arch"].items() if key not in new_keys}
    (tmp_path / "config.json").write_text(json.dumps(config))
    loaded, _ = load_pretrained(tmp_path)
    assert loaded.config == model.config
    ids = random_ids(2, 20)
    with torch.no_grad():
        assert torch.equal(loaded(ids).logits, model(ids).logits)
    del config["arch"]["hidden_size"]  # a key every checkpoint has held: its absence is damage, not age
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(CrammingError, match=r"config.json: missing arch key\(s\): hidden_size$"):
        load_pretrained(tmp_path)
