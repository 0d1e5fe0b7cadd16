"""What every command shares about how training runs: the schedules, AdamW's parameter groups, the precision
policy, the device."""

import pytest
import torch
from torch import nn

from cramming.engine.adamw import build_optimizer
from cramming.engine.device import resolve_device
from cramming.errors import CrammingError
from cramming.engine.precision import Precision
from cramming.model import build_mlm_model
from cramming.model.config import ModelConfig
from cramming.engine.schedules import LR_SCHEDULES, accumulation_steps, lr_multiplier, target_batch_size


@pytest.mark.parametrize(("fraction", "expected"), [(0.0, 0.25), (0.6, 0.85), (0.75, 1.0), (1.0, 0.0), (0.9, 0.4)])
def test_triangle_lr(fraction, expected):
    assert lr_multiplier("triangle", fraction) == pytest.approx(expected)


def test_other_lr_schedules():
    assert lr_multiplier("constant", 0.6) == 1.0
    assert lr_multiplier("linear", 0.75) == pytest.approx(0.25)
    assert lr_multiplier("cosine", 0.05, warmup_fraction=0.1) == pytest.approx(0.5)
    assert lr_multiplier("cosine", 0.55, warmup_fraction=0.1) == pytest.approx(0.5)
    assert lr_multiplier("cosine", 1.0) == pytest.approx(0.0)
    assert lr_multiplier("cosine", 0.5, warmup_fraction=0.0) == pytest.approx(0.5)  # no warm-up
    assert lr_multiplier("cosine", 1.0, warmup_fraction=1.0) == pytest.approx(1.0)  # warm-up only
    with pytest.raises(CrammingError, match="lr_schedule='warmup' is unknown"):
        lr_multiplier("warmup", 0.5)


def test_ablation_schedules():
    w = 0.1
    for schedule in ("wsd", "inverse-sqrt"):  # the same linear warm-up as cosine
        assert lr_multiplier(schedule, 0.05, w) == pytest.approx(0.5)
        assert lr_multiplier(schedule, 0.1, w) == pytest.approx(1.0)
    assert lr_multiplier("wsd", 0.5, w) == 1.0  # stable
    assert lr_multiplier("wsd", 0.9, w) == pytest.approx(0.5)  # half-way through the last fifth
    assert lr_multiplier("wsd", 1.0, w) == 0.0
    assert lr_multiplier("inverse-sqrt", 0.4, w) == pytest.approx(0.5)  # sqrt(0.1 / 0.4)
    assert lr_multiplier("inverse-sqrt", 1.0, w) == pytest.approx(0.1**0.5)
    assert lr_multiplier("one-cycle", 0.0, w) == pytest.approx(1 / 25)
    assert lr_multiplier("one-cycle", 0.05, w) == pytest.approx((1 + 1 / 25) / 2)
    assert lr_multiplier("one-cycle", 0.1, w) == pytest.approx(1.0)
    assert lr_multiplier("one-cycle", 0.55, w) == pytest.approx((1 + 1 / 25e4) / 2)
    assert lr_multiplier("one-cycle", 1.0, w) == pytest.approx(1 / 25e4)
    for schedule in LR_SCHEDULES:  # every schedule, a new one too
        values = [lr_multiplier(schedule, i / 1000, w) for i in range(1001)]
        assert all(0.0 <= v <= 1.0 for v in values), schedule


def test_glue_steps_follow_the_same_warmup_then_cosine():
    """GLUE drives the shared schedule by optimizer steps: f = step / total."""
    total, warmup_fraction = 100, 0.1
    multipliers = [lr_multiplier("cosine", step / total, warmup_fraction) for step in range(total + 1)]
    assert multipliers[0] == 0.0 and multipliers[5] == pytest.approx(0.5) and multipliers[10] == pytest.approx(1.0)
    assert multipliers[55] == pytest.approx(0.5) and multipliers[100] == pytest.approx(0.0)
    assert all(a <= b for a, b in zip(multipliers[:10], multipliers[1:11]))
    assert all(a >= b for a, b in zip(multipliers[10:], multipliers[11:]))


@pytest.mark.parametrize(("fraction", "expected"), [(0.0, 128), (0.3, 4160), (0.6, 8192), (0.75, 8192), (1.0, 8192)])
def test_batch_ramp(fraction, expected):
    assert target_batch_size(fraction, 128, 8192, 0.6) == pytest.approx(expected)


def test_accumulation_follows_the_ramp():
    assert accumulation_steps(0.0, 128, 8192, 0.6) == 1
    assert accumulation_steps(0.3, 128, 8192, 0.6) == 32  # 4160 / 128 = 32.5, rounded to even
    assert accumulation_steps(0.6, 128, 8192, 0.6) == 64
    assert accumulation_steps(1.0, 256, 8192, 0.6) == 32  # two ranks of 128
    assert accumulation_steps(0.5, 128, 64, 0.6) == 1  # never below one microbatch


def groups_by_decay(optimizer) -> dict[float, set[int]]:
    return {group["weight_decay"]: {id(p) for p in group["params"]} for group in optimizer.param_groups}


def test_weight_decay_on_matrices_only_and_optionally_not_on_embeddings():
    model = build_mlm_model(ModelConfig(name="t", num_layers=1, hidden_size=32, num_heads=2,
                                        intermediate_size=64, bias=True), 100)
    embedding = model.bert.embeddings.word_embeddings.weight
    norms_and_biases = {id(p) for name, p in model.named_parameters() if p.dim() < 2}
    assert len(norms_and_biases) > 5  # LayerNorms, Linear biases, decoder bias, position scale
    groups = groups_by_decay(build_optimizer(model, lr=1e-3, betas=(0.9, 0.98), eps=1e-12, weight_decay=0.01))
    assert groups[0.0] == norms_and_biases and id(embedding) in groups[0.01]
    groups = groups_by_decay(build_optimizer(model, lr=1e-3, betas=(0.9, 0.98), eps=1e-12, weight_decay=0.01,
                                             decay_embeddings=False))
    assert groups[0.0] == norms_and_biases | {id(embedding)} and id(embedding) not in groups[0.01]
    assert len(groups[0.0]) + len(groups[0.01]) == len(list(model.parameters()))


def test_fused_and_foreach_adamw_take_the_same_step():
    torch.manual_seed(0)
    models = [nn.Linear(8, 4), nn.Linear(8, 4)]
    models[1].load_state_dict(models[0].state_dict())
    x = torch.randn(16, 8)
    for model, fused in zip(models, (True, False)):
        optimizer = build_optimizer(model, lr=1e-2, betas=(0.9, 0.98), eps=1e-12, weight_decay=0.01, fused=fused)
        assert optimizer.defaults["fused"] is fused
        model(x).square().mean().backward()
        optimizer.step()
    torch.testing.assert_close(models[0].weight, models[1].weight)


def test_precision_policy_on_the_cpu():
    cpu = torch.device("cpu")
    fp32 = Precision.resolve("auto", cpu, "eval.precision")
    assert fp32.name == "fp32" and fp32.dtype == torch.float32 and not fp32.grad_scaler().is_enabled()
    with fp32.autocast():
        assert not torch.is_autocast_enabled("cpu")
    bf16 = Precision.resolve("bf16", cpu, "benchmark.dtype")
    with bf16.autocast():
        assert (torch.randn(4, 4) @ torch.randn(4, 4)).dtype == torch.bfloat16
    with pytest.raises(CrammingError, match="eval.precision='fp8' must be auto, fp32, bf16, fp16"):
        Precision.resolve("fp8", cpu, "eval.precision")


def test_device_choice():
    assert resolve_device("cpu", "eval.device") == torch.device("cpu")
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert resolve_device("auto", "eval.device").type == expected
    with pytest.raises(CrammingError, match="eval.device='tpu' is not auto, cpu, cuda or cuda:<index>"):
        resolve_device("tpu", "eval.device")
    if not torch.cuda.is_available():
        with pytest.raises(CrammingError, match="eval.device=cuda but no CUDA GPU is available"):
            resolve_device("cuda", "eval.device")
