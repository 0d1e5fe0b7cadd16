"""arch.init_scheme: every scheme trains, and each has the property that defines it (gates at 0, DeepNet's
α, the scaled stds of T-Fixup and DeepNet, SmallInit's range); gates work on every path of the encoder."""

import functools
import math

import pytest
import torch
import torch.utils.checkpoint

from cramming.model import build_mlm_model
from cramming.model.crammed_bert import never_special
from cramming.model.initialization import SMALL_INIT

from .conftest import SCHEMES, arch_config, mlm_batch

V = 256
GATED = [("rezero", "none"), ("skipinit", "pre"), ("skipinit", "post")]


def tiny(init_scheme: str, norm_scheme: str, name: str = "crammed-bert-tiny"):
    torch.manual_seed(0)
    return build_mlm_model(arch_config(name, f"init_scheme={init_scheme}", f"norm_scheme={norm_scheme}"), V)


@pytest.mark.parametrize("init_scheme, norm_scheme", SCHEMES)
def test_every_scheme_trains(init_scheme, norm_scheme):
    model = tiny(init_scheme, norm_scheme)
    loss = model(**mlm_batch(4, 32, V)).loss
    loss.backward()
    assert torch.isfinite(loss)
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    gate = model.bert.layer[-1].residual_gate
    if init_scheme in ("rezero", "skipinit"):  # closed at init, and learning to open
        assert gate.shape == ((1,) if init_scheme == "rezero" else (2,))
        assert not gate.any() and gate.grad.all()
    else:
        assert gate is None
    has_layer_norms = any(key.endswith("attention_norm.weight") for key in model.state_dict())
    assert has_layer_norms == (norm_scheme != "none")


@pytest.mark.parametrize("init_scheme, norm_scheme", GATED)
def test_a_gated_layer_starts_as_the_identity(init_scheme, norm_scheme):
    layer = tiny(init_scheme, norm_scheme).bert.layer[0]
    x = torch.randn(2, 8, 128)
    expected = x if norm_scheme != "post" else layer.ffn_norm(layer.attention_norm(x))  # post: LN(LN(x + 0))
    torch.testing.assert_close(layer(x, None)[0], expected)


def test_deepnorm_up_weights_the_residual():
    layer = tiny("deepnorm", "post").bert.layer[0]
    alpha = (2 * 2) ** 0.25  # (2N)^1/4, N = 2 layers
    x = torch.randn(2, 8, 128)
    y = layer.attention_norm(alpha * x + layer.attention(x, None)[0])
    torch.testing.assert_close(layer(x, None)[0], layer.ffn_norm(alpha * y + layer.ffn(y)))


def xavier_std(weight: torch.Tensor, gain: float) -> float:
    return gain * math.sqrt(2 / sum(weight.shape))


@pytest.mark.parametrize("init_scheme, norm_scheme", [("tfixup", "none"), ("deepnorm", "post"),
                                                     ("scaled", "pre")])
def test_scaled_stds_follow_the_formula(init_scheme, norm_scheme):
    model = tiny(init_scheme, norm_scheme)
    gain = {"tfixup": 0.67 * 2**-0.25, "deepnorm": (8 * 2) ** -0.25}.get(init_scheme)  # N = 2 layers
    layer = model.bert.layer[1]
    query, key, value = layer.attention.qkv.weight.split(128)
    gate, ffn_value = layer.ffn.intermediate.weight.chunk(2)  # GLU: (256, 128) each
    if gain is None:  # scaled: GPT-2's N(0, init_std / sqrt(2N)) on the residual outputs, N(0, init_std) else
        expected = {query: 0.02, value: 0.02, gate: 0.02, layer.attention.dense.weight: 0.01,
                    layer.ffn.output.weight: 0.01}
    else:
        expected = {query: xavier_std(query, 1.0), key: xavier_std(key, 1.0), value: xavier_std(value, gain),
                    layer.attention.dense.weight: xavier_std(layer.attention.dense.weight, gain),
                    gate: xavier_std(gate, gain), ffn_value: xavier_std(ffn_value, gain),
                    layer.ffn.output.weight: xavier_std(layer.ffn.output.weight, gain)}
    for weight, std in expected.items():
        assert weight.std().item() == pytest.approx(std, rel=0.03)
    embedding_std = 128**-0.5 if init_scheme == "tfixup" else 0.02
    assert model.bert.embeddings.word_embeddings.weight.std().item() == pytest.approx(embedding_std, rel=0.03)


def test_small_init_embeddings():
    for name in ("crammed-bert-tiny", "bert-base-tiny"):  # scaled sinusoids, learned positions
        embeddings = tiny("small", "pre", name).bert.embeddings
        tables = [embeddings.word_embeddings.weight]
        if embeddings.position_embeddings is None:
            assert embeddings.position_scale.item() == pytest.approx(SMALL_INIT)
        else:
            tables.append(embeddings.position_embeddings.weight)
        for table in tables:
            assert table.abs().max() <= SMALL_INIT
            assert table.std().item() == pytest.approx(SMALL_INIT / 3**0.5, rel=0.05)  # U(-a, a): a / sqrt(3)
    dense = tiny("small", "pre").bert.layer[0].attention.dense.weight
    assert dense.std().item() == pytest.approx(0.02, rel=0.03)  # the rest as normal


def open_gates(model):
    """Gates drawn away from 0, so that they count."""
    with torch.no_grad():
        for layer in model.bert.layer:
            layer.residual_gate.normal_()
    return model


@pytest.mark.parametrize("init_scheme, norm_scheme", [("rezero", "none"), ("skipinit", "post"),
                                                     ("deepnorm", "post")])
def test_every_encoder_path_runs_the_residual_of_the_scheme(init_scheme, norm_scheme):
    """Unpadded, sparse positions and `states` (eager): the same outputs as the plain forward."""
    model = tiny(init_scheme, norm_scheme)
    if init_scheme != "deepnorm":
        open_gates(model)
    ids = torch.randint(5, V, (2, 20))
    padded = torch.cat([ids, torch.zeros(2, 12, dtype=torch.long)], dim=1)
    mask = (padded != 0).long()
    positions = torch.tensor([[1, 5, 19], [0, 7, 8]])
    with torch.no_grad():
        full = model(ids).logits  # (2, 20, V)
        torch.testing.assert_close(model(padded, attention_mask=mask).logits[:, :20], full)
        sparse = model(ids, masked_positions=positions).logits  # the head's own: `full` is a prediction's
        torch.testing.assert_close(never_special(sparse), full.gather(1, positions[:, :, None].expand(-1, -1, V)))
        torch.testing.assert_close(model.bert.states(ids, eager=True).hidden_states[-1], model.bert(ids))


def test_gradient_checkpointing_gives_the_gates_the_same_gradients():
    model = open_gates(tiny("skipinit", "post"))
    batch = mlm_batch(2, 16, V)
    model(**batch).loss.backward()
    expected = {name: p.grad.clone() for name, p in model.named_parameters()}
    model.zero_grad()
    model.bert.gradient_checkpointing = True  # as transformers' gradient_checkpointing_enable() sets it
    model.bert._gradient_checkpointing_func = functools.partial(torch.utils.checkpoint.checkpoint,
                                                                use_reentrant=False)
    model(**batch).loss.backward()
    for name, p in model.named_parameters():
        torch.testing.assert_close(p.grad, expected[name], msg=name)
