"""The timed training step shared by the benchmark and the calculator: it trains, it clips when asked,
and it reports the time it measured."""

import torch

from cramming.bench.timing import TimedStep, time_training
from cramming.data.mlm import synthetic_mlm_batch
from cramming.engine.precision import Precision
from cramming.model import ModelConfig, build_mlm_model

TINY = ModelConfig(name="tiny", num_layers=1, hidden_size=32, num_heads=2, intermediate_size=64)
CPU = torch.device("cpu")


def test_a_timed_step_is_a_training_step():
    torch.manual_seed(0)
    model = build_mlm_model(TINY, 200)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    step = TimedStep(model, synthetic_mlm_batch(4, 32, 200, 0.25), Precision("fp32", "cpu"), CPU)
    losses = []
    for _ in range(5):
        assert step.step() > 0
        with torch.no_grad():
            losses.append(model(**step.batch).loss.item())
    assert all(not torch.equal(before[name], p) for name, p in model.named_parameters() if p.dim() >= 2)
    assert losses[-1] < losses[0]  # five AdamW steps on one batch lower its loss
    assert all(p.grad is None for p in model.parameters())  # gradients dropped after each step


def test_clipping_bounds_the_update():
    """With lr 1e-3 and a tiny clip, AdamW's first step moves each weight by about lr either way, but the
    clipped gradient norm shows in the second moment: compare to the unclipped run's optimizer state."""
    states = []
    for clip in (None, 1e-6):
        torch.manual_seed(0)
        step = TimedStep(build_mlm_model(TINY, 200), synthetic_mlm_batch(4, 32, 200, 0.25),
                         Precision("fp32", "cpu"), CPU, grad_clip=clip)
        step.step()
        states.append(sum(s["exp_avg_sq"].sum().item() for s in step.optimizer.state.values()))
    assert states[1] < 1e-10 < states[0]


def test_time_training_reports_tokens_per_second():
    timing = time_training(TINY, batch=4, vocab_size=200, seq_length=32, mlm_rate=0.25, min_steps=2)
    assert timing.steps == 2 and timing.seconds > 0
    assert timing.tokens_per_s == 2 * 4 * 32 / timing.seconds
