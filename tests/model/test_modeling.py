"""Forward semantics: shapes, sparse (masked-only) loss, padding mask, dropout, init, FLOPs."""

import dataclasses

import pytest
import torch
import torch.nn.functional as F

from cramming.model import build_classifier, build_mlm_model, training_flops_per_token

from .conftest import arch_config, mlm_batch

V = 256


@pytest.mark.parametrize("name", ["crammed-bert-tiny", "bert-base-tiny"])
def test_mlm_shapes_and_loss(name):
    torch.manual_seed(0)
    model = build_mlm_model(arch_config(name), V)
    batch = mlm_batch(4, 32, V)
    out = model(**batch)
    k = batch["masked_positions"].size(1)
    expected = (4, k, V) if model.config.sparse_prediction else (4, 32, V)  # bert-base: full-sequence head
    assert out.logits.shape == expected
    assert out.loss.ndim == 0 and torch.isfinite(out.loss)
    out.loss.backward()
    assert model(batch["input_ids"]).loss is None
    assert model(batch["input_ids"]).logits.shape == (4, 32, V)


@pytest.mark.parametrize("name, overrides", [
    ("crammed-bert-tiny", ()),
    ("modern-bert-tiny", ("local_attention=16",)),  # the queries at the masked positions: rotated, windowed
])
def test_sparse_loss_equals_full_loss_on_masked_positions(name, overrides):
    torch.manual_seed(0)
    cfg = arch_config(name, *overrides)
    sparse = build_mlm_model(cfg, V)
    full = build_mlm_model(dataclasses.replace(cfg, sparse_prediction=False), V)
    full.load_state_dict(sparse.state_dict())
    batch = mlm_batch(4, 32, V)
    sparse_out, full_out = sparse(**batch), full(**batch)
    reference = F.cross_entropy(full_out.logits.flatten(0, 1), batch["labels"].flatten(), ignore_index=-100)
    torch.testing.assert_close(sparse_out.loss, reference)
    torch.testing.assert_close(full_out.loss, reference)
    positions = batch["masked_positions"]
    gathered = full_out.logits.gather(1, positions[:, :, None].expand(-1, -1, V))
    torch.testing.assert_close(sparse_out.logits, gathered)


@pytest.mark.parametrize("name, overrides", [
    ("crammed-bert-tiny", ()), ("bert-base-tiny", ()), ("modern-bert-tiny", ("local_attention=8",)),
])
def test_padding_does_not_change_real_tokens(name, overrides):
    torch.manual_seed(0)
    model = build_mlm_model(arch_config(name, *overrides), V).eval()
    classifier = build_classifier(arch_config(name, *overrides), V, num_labels=3).eval()
    ids = torch.randint(5, V, (2, 20))
    padded = torch.cat([ids, torch.zeros(2, 12, dtype=torch.long)], dim=1)  # [PAD] = 0
    mask = torch.cat([torch.ones(2, 20), torch.zeros(2, 12)], dim=1).long()
    with torch.no_grad():
        torch.testing.assert_close(model(padded, attention_mask=mask).logits[:, :20], model(ids).logits)
        unpadded = classifier(ids, torch.ones_like(ids)).logits
        torch.testing.assert_close(classifier(padded, mask).logits, unpadded)
        if model.config.sparse_prediction:
            positions = torch.tensor([[1, 5, 19], [0, 7, 8]])
            sparse_padded = model(padded, attention_mask=mask, masked_positions=positions).logits
            torch.testing.assert_close(sparse_padded, model(ids, masked_positions=positions).logits)
        # without the mask the padding would leak into the real tokens
        assert not torch.allclose(model(padded).logits[:, :20], model(ids).logits, atol=1e-4)


def test_classifier_losses_and_dropout():
    torch.manual_seed(0)
    cfg = dataclasses.replace(arch_config("crammed-bert-tiny"), dropout=0.1)
    ids, mask = torch.randint(5, V, (4, 16)), torch.ones(4, 16, dtype=torch.long)
    classifier = build_classifier(cfg, V, num_labels=3)
    out = classifier(ids, mask, labels=torch.tensor([0, 1, 2, 1]))
    assert out.logits.shape == (4, 3)
    torch.testing.assert_close(out.loss, F.cross_entropy(out.logits, torch.tensor([0, 1, 2, 1])))
    # dropout in train mode, none in eval mode
    assert not torch.equal(classifier(ids, mask).logits, classifier(ids, mask).logits)
    classifier.eval()
    assert torch.equal(classifier(ids, mask).logits, classifier(ids, mask).logits)
    regressor = build_classifier(cfg, V, num_labels=1).eval()
    targets = torch.tensor([0.5, 1.0, 4.5, 3.0])
    out = regressor(ids, mask, labels=targets)
    assert out.logits.shape == (4, 1)
    torch.testing.assert_close(out.loss, F.mse_loss(out.logits.squeeze(-1), targets))


def test_pretraining_has_no_dropout():
    model = build_mlm_model(arch_config("crammed-bert-tiny"), V).train()
    batch = mlm_batch(2, 16, V)
    assert torch.equal(model(**batch).logits, model(**batch).logits)


def test_init_schemes():
    torch.manual_seed(0)
    normal = build_mlm_model(arch_config("crammed-bert", "num_layers=2"), V)
    scaled = build_mlm_model(arch_config("crammed-bert", "num_layers=2", "init_scheme=scaled"), V)
    for model, residual_std in ((normal, 0.02), (scaled, 0.02 / 2)):  # 0.02 / sqrt(2 * 2 layers)
        layer = model.bert.layer[0]
        assert layer.attention.qkv.weight.std().item() == pytest.approx(0.02, rel=0.02)
        assert layer.attention.dense.weight.std().item() == pytest.approx(residual_std, rel=0.02)
        assert layer.ffn.output.weight.std().item() == pytest.approx(residual_std, rel=0.02)


def test_flops_per_token():
    crammed, bert = arch_config("crammed-bert"), arch_config("bert-base")
    # per layer: qkv 3H^2 + dense H^2 + intermediate 4H^2 + output (2H^2 GLU, 4H^2 GELU); attention 2TH
    dense_flops = 6 * (16 * (10 * 768 * 768 + 2 * 128 * 768) + 768 * 32768)  # the head on every token
    sparse_flops = 6 * (16 * (10 * 768 * 768 + 2 * 128 * 768) + 32 / 128 * 768 * 32768)
    assert training_flops_per_token(crammed, 32768, 128, 0.25) == pytest.approx(sparse_flops)
    dense = dataclasses.replace(crammed, sparse_prediction=False)
    assert training_flops_per_token(dense, 32768, 128, 0.25) == pytest.approx(dense_flops)
    bert_flops = 6 * (12 * (12 * 768 * 768 + 2 * 128 * 768) + 768 * 768 + 768 * 30522)
    assert training_flops_per_token(bert, 30522, 128, 0.15) == pytest.approx(bert_flops)
