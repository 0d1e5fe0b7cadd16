"""The one training step's mechanics (cramming.engine.step), shared by pretraining, GLUE fine-tuning and the
benchmark: a non-finite step changes nothing, with and without a fused optimizer; the fused one skips it on the
device; a step the budget ends early averages the microbatches it ran; the recipe's AdamW is the file pretraining
reads; the benchmark's timed step runs the same step."""

import itertools

import pytest
import torch
from omegaconf import OmegaConf

from cramming import CONFIG_DIR, compose_config
from cramming.engine.adamw import build_optimizer, recipe_adamw
from cramming.bench.host_sync import no_host_sync
from cramming.bench.timing import TimedStep
from cramming.data.mlm import synthetic_mlm_batch
from cramming.engine.step import Step, StepPoints, StepState, skips_on_device
from cramming.engine.precision import Precision
from cramming.model import ModelConfig, build_mlm_model
from cramming.train.optimizers import build_pretraining_optimizer

TINY = ModelConfig(name="tiny", num_layers=1, hidden_size=32, num_heads=2, intermediate_size=64)
FP32 = Precision("fp32", "cpu")
CPU = torch.device("cpu")


class Recorded:
    """A technique's points in a step, noting the optimizer-step points and, with `poison`, making every loss NaN."""

    def __init__(self, poison: bool = False):
        self.poison, self.called = poison, []

    def after_forward(self, state, batch, loss, output):
        return loss * float("nan") if self.poison else loss

    def points(self) -> StepPoints:
        return StepPoints(after_forward=[self.after_forward],
                          before_optimizer_step=[lambda state: self.called.append("before")],
                          after_optimizer_step=[lambda state: self.called.append("after")])


def trained_once(fused: bool):
    """A tiny model after one applied step (so the optimizer has state), its optimizer and a step maker."""
    torch.manual_seed(0)
    model = build_mlm_model(TINY, 200)
    optimizer = build_optimizer(model, lr=1e-3, betas=(0.9, 0.98), eps=1e-12, weight_decay=0.01, fused=fused)
    scaler, batches = FP32.grad_scaler(), itertools.repeat(synthetic_mlm_batch(4, 32, 200, 0.25))

    def step(points: StepPoints | None = None, **options) -> Step:
        return Step(model, optimizer, scaler, FP32, batches, points=points, grad_clip=0.5, **options)

    step().run(StepState(model=model, device=CPU))
    return model, optimizer, step


def snapshot(model, optimizer) -> list[torch.Tensor]:
    tensors = [p.detach().clone() for p in model.parameters()]
    return tensors + [t.clone() for state in optimizer.state.values() for t in state.values() if torch.is_tensor(t)]


@pytest.mark.parametrize("fused", [True, False])
def test_a_non_finite_step_changes_neither_weights_nor_optimizer_state(fused):
    model, optimizer, step = trained_once(fused)
    assert skips_on_device(optimizer) is fused
    before, hooks, state = snapshot(model, optimizer), Recorded(poison=True), StepState(model=model, device=CPU)
    step(hooks.points()).run(state)
    assert not state.step_finite and torch.isnan(state.grad_norm)
    assert all(torch.equal(a, b) for a, b in zip(before, snapshot(model, optimizer)))
    assert all(p.grad is None for p in model.parameters())
    # the fused kernel skips on the device, so the hooks around the update run; the others return early
    assert hooks.called == (["before", "after"] if fused else [])


def test_the_fused_skip_makes_no_host_sync_and_a_finite_step_applies():
    model, optimizer, step = trained_once(fused=True)
    before, state = snapshot(model, optimizer), StepState(model=model, device=CPU, lr=2e-3)
    with no_host_sync():
        step().run(state)
    after = snapshot(model, optimizer)
    assert not any(torch.equal(a, b) for a, b in zip(before[:2], after[:2]))
    assert not hasattr(optimizer, "found_inf")  # the flag does not outlive the step
    assert optimizer.param_groups[0]["lr"] == 2e-3  # the step sets the learning rate it is given


def test_without_the_skip_the_update_always_applies_and_nothing_is_measured():
    """GLUE fine-tuning's use: no skip (only an fp16 scaler's own), no clipping, no gradient norm."""
    model, optimizer, step = trained_once(fused=True)
    before, state = snapshot(model, optimizer), StepState(model=model, device=CPU)
    plain = Step(model, optimizer, FP32.grad_scaler(), FP32, step().batches, skip_nonfinite=False)
    plain.run(state)
    assert state.grad_norm is None and state.step_finite is None
    assert not torch.equal(before[0], next(model.parameters()))


def test_a_step_the_budget_ends_early_runs_fewer_microbatches_as_their_mean():
    """Pretraining's step (cramming.train.loop.train_step) runs the engine's parts and stops after 2 of 3 planned
    microbatches when the budget runs out; their gradients count as a mean over those 2, as the step's loss does."""
    model, optimizer, step = trained_once(fused=True)
    state, ended_early = StepState(model=model, device=CPU, accumulate=3), step()
    ended_early.begin(state)
    ended_early.microbatch(state)
    ended_early.microbatch(state)
    ended_early.gradients(state)
    gradient = [p.grad.clone() for p in model.parameters()]
    single = StepState(model=model, device=CPU)
    model.zero_grad(set_to_none=True)
    step().run(single, update=False)  # the same batch each time: the mean of two is one microbatch's
    assert state.step_microbatches == 2
    assert torch.allclose(state.step_loss, single.step_loss)
    assert all(torch.allclose(a, p.grad, atol=1e-6) for a, p in zip(gradient, model.parameters()))


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
        # the tied decoder's logits, the loss and every gradient turn NaN
        model.bert.embeddings.word_embeddings.weight[0, 0] = float("nan")
        assert torch.isnan(model(**step.batch).loss)
    before = snapshot(model, step.optimizer)
    step.step()
    after = snapshot(model, step.optimizer)
    # nan_to_num: the poked weight holds a NaN, which torch.equal never matches
    assert all(torch.equal(a.nan_to_num(), b.nan_to_num()) for a, b in zip(before, after))
