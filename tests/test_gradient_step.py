"""The one training step's mechanics (cramming.gradient_step), shared by pretraining, GLUE fine-tuning and the
benchmark: a non-finite step changes nothing, with and without a fused optimizer; the fused one skips it on the
device; the recipe's AdamW is the file pretraining reads; the benchmark's timed step runs these mechanics."""

import pytest
import torch
from omegaconf import OmegaConf

from cramming import CONFIG_DIR, compose_config
from cramming.adamw import build_optimizer, recipe_adamw
from cramming.bench.host_sync import no_host_sync
from cramming.bench.timing import TimedStep
from cramming.data.mlm import synthetic_mlm_batch
from cramming.gradient_step import apply_update, backward, gradient_finite, gradient_norm, skips_on_device
from cramming.gradient_step import Precision
from cramming.model import ModelConfig, build_mlm_model
from cramming.train.optimizers import build_pretraining_optimizer

TINY = ModelConfig(name="tiny", num_layers=1, hidden_size=32, num_heads=2, intermediate_size=64)
FP32 = Precision("fp32", "cpu")


def trained_once(fused: bool):
    """A tiny model after one applied step (so the optimizer has state), its optimizer and scaler."""
    torch.manual_seed(0)
    model = build_mlm_model(TINY, 200)
    optimizer, scaler = build_optimizer(model, lr=1e-3, betas=(0.9, 0.98), eps=1e-12, weight_decay=0.01,
                                        fused=fused), FP32.grad_scaler()
    backward(model, synthetic_mlm_batch(4, 32, 200, 0.25), FP32, scaler)
    apply_update(optimizer, scaler, torch.tensor(True))
    return model, optimizer, scaler


def snapshot(model, optimizer) -> list[torch.Tensor]:
    tensors = [p.detach().clone() for p in model.parameters()]
    return tensors + [t.clone() for state in optimizer.state.values() for t in state.values() if torch.is_tensor(t)]


@pytest.mark.parametrize("fused", [True, False])
def test_a_non_finite_step_changes_neither_weights_nor_optimizer_state(fused):
    model, optimizer, scaler = trained_once(fused)
    assert skips_on_device(optimizer) is fused
    before = snapshot(model, optimizer)
    loss = backward(model, synthetic_mlm_batch(4, 32, 200, 0.25), FP32, scaler,
                    on_output=lambda output: output.loss * float("nan"))
    norm = gradient_norm(optimizer, scaler, model.parameters(), 0.5)
    finite = torch.isfinite(loss) & gradient_finite(norm, scaler)
    called = []
    apply_update(optimizer, scaler, finite, before=lambda: called.append("before"), after=lambda: called.append("after"))
    assert not finite and torch.isnan(norm)
    assert all(torch.equal(a, b) for a, b in zip(before, snapshot(model, optimizer)))
    assert all(p.grad is None for p in model.parameters())
    # the fused kernel skips on the device, so the callbacks around the update run; the others return early
    assert called == (["before", "after"] if fused else [])


def test_the_fused_skip_makes_no_host_sync_and_a_finite_step_applies():
    model, optimizer, scaler = trained_once(fused=True)
    before = snapshot(model, optimizer)
    with no_host_sync():
        loss = backward(model, synthetic_mlm_batch(4, 32, 200, 0.25), FP32, scaler)
        norm = gradient_norm(optimizer, scaler, model.parameters(), 0.5)
        apply_update(optimizer, scaler, torch.isfinite(loss) & gradient_finite(norm, scaler))
    after = snapshot(model, optimizer)
    assert not any(torch.equal(a, b) for a, b in zip(before[:2], after[:2]))
    assert not hasattr(optimizer, "found_inf")  # the flag does not outlive the step


def test_without_a_flag_the_update_always_applies():
    """GLUE fine-tuning's use: no skip (only an fp16 scaler's own), no clipping."""
    model, optimizer, scaler = trained_once(fused=True)
    before = snapshot(model, optimizer)
    backward(model, synthetic_mlm_batch(4, 32, 200, 0.25), FP32, scaler)
    apply_update(optimizer, scaler)
    assert not torch.equal(before[0], next(model.parameters()))


def test_the_recipe_adamw_is_the_one_pretraining_builds_from_its_config_file():
    values = OmegaConf.load(CONFIG_DIR / "optim" / "adamw.yaml")
    from cramming.pretraining import PretrainConfig  # noqa: F401  (registers the schemas pretrain.yaml names)

    cfg = compose_config("pretrain", [])  # the optim group's adamw, as pretraining composes it
    model = build_mlm_model(TINY, 200)
    recipe, pretraining = recipe_adamw(model), build_pretraining_optimizer(model, cfg.train.optim)
    for ours, theirs in zip(recipe.param_groups, pretraining.param_groups):
        for key in ("lr", "betas", "eps", "weight_decay", "fused"):
            assert ours[key] == theirs[key]
    assert recipe.param_groups[0]["lr"] == values.lr and tuple(recipe.param_groups[0]["betas"]) == tuple(values.betas)
    assert recipe.param_groups[0]["eps"] == values.eps and recipe.param_groups[0]["weight_decay"] == values.weight_decay


def test_the_timed_step_skips_a_non_finite_step_as_training_does():
    """The benchmark times the trainer's mechanics: a NaN batch leaves the model as it was."""
    torch.manual_seed(0)
    model = build_mlm_model(TINY, 200)
    step = TimedStep(model, synthetic_mlm_batch(4, 32, 200, 0.25), FP32, torch.device("cpu"))
    step.step()
    with torch.no_grad():
        model.bert.embeddings.word_embeddings.weight[0, 0] = float("nan")  # the tied decoder's logits, the loss and every gradient turn NaN
        assert torch.isnan(model(**step.batch).loss)
    before = snapshot(model, step.optimizer)
    step.step()
    after = snapshot(model, step.optimizer)
    # nan_to_num: the poked weight holds a NaN, which torch.equal never matches
    assert all(torch.equal(a.nan_to_num(), b.nan_to_num()) for a, b in zip(before, after))
