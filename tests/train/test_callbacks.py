"""Callbacks in real (tiny, in-process) runs: the named points in order, a changed loss taking effect,
and callback state riding in checkpoints across an interruption and a resume."""

import pytest
import torch

from cramming.train.callbacks import Callback, CallbackList
from cramming.pretraining import pretrain
from tests.train.runs import STEP_RUN, InterruptAt, compose_config, records

def config(*overrides: str):
    return compose_config([*STEP_RUN, *overrides])


class Recorder(Callback):
    """Notes every named point with the step count at that moment; counts steps as its checkpointed state."""

    def __init__(self):
        self.events, self.steps_seen = [], 0

    def on_train_start(self, state):
        self.events.append(("on_train_start", state.progress.step))

    def before_step(self, state):
        self.events.append(("before_step", state.progress.step))

    def after_forward(self, state, batch, loss, output):
        self.events.append(("after_forward", state.progress.step))
        return loss

    def before_optimizer_step(self, state):
        assert all(p.grad is not None for p in state.model.parameters())  # gradients are there to act on
        self.events.append(("before_optimizer_step", state.progress.step))

    def after_optimizer_step(self, state):
        self.events.append(("after_optimizer_step", state.progress.step))

    def after_step(self, state):
        self.steps_seen += 1
        self.events.append(("after_step", state.progress.step))

    def on_train_end(self, state, reason):
        self.events.append(("on_train_end", reason))

    def state_dict(self):
        return {"steps_seen": self.steps_seen}

    def load_state_dict(self, state):
        self.steps_seen = state["steps_seen"]


def test_the_named_points_come_in_order_and_the_state_is_checkpointed(shared_cache, tmp_path):
    recorder = Recorder()
    run_dir = pretrain(config(f"output_dir={tmp_path}", "train.max_steps=2"), callbacks=[recorder])
    # step 1 (f = 0) is one microbatch; step 2 (f = 0.5) ramps to 28 of 32 sequences: 2 microbatches of 16
    assert recorder.events == [
        ("on_train_start", 0),
        ("before_step", 0), ("after_forward", 0), ("before_optimizer_step", 0), ("after_optimizer_step", 0),
        ("after_step", 1),
        ("before_step", 1), *[("after_forward", 1)] * 2, ("before_optimizer_step", 1), ("after_optimizer_step", 1),
        ("after_step", 2),
        ("on_train_end", "max_steps"),
    ]
    saved = torch.load(run_dir / "checkpoints/final/trainer_state.pt", weights_only=True)
    assert saved["callbacks"]["Recorder"] == {"steps_seen": 2}


class ScaleLoss(Callback):
    def after_forward(self, state, batch, loss, output):
        return 2.0 * loss


def test_a_callback_can_change_the_loss_that_is_trained(shared_cache, tmp_path):
    plain = pretrain(config(f"output_dir={tmp_path / 'plain'}", "train.max_steps=1"))
    scaled = pretrain(config(f"output_dir={tmp_path / 'scaled'}", "train.max_steps=1"), callbacks=[ScaleLoss()])
    assert records(scaled)[0]["loss"] == pytest.approx(2 * records(plain)[0]["loss"], rel=1e-5)


@pytest.mark.slow
def test_callback_and_logging_state_survive_an_interruption(shared_cache, tmp_path):
    """Records every 3 steps; interrupted before step 6 (the last checkpoint, step 5, holds a partial
    logging window of steps 4 and 5), then resumed: the records equal an uninterrupted run's."""
    # records by steps alone: none for validations, none for progress (every 2% would be every step here)
    window = ("logging.every_steps=3", "logging.every_fraction=1", "train.validation.fractions=[]")
    straight = pretrain(config(f"output_dir={tmp_path / 'a'}", *window))
    first = Recorder()
    with pytest.raises(KeyboardInterrupt):
        pretrain(config(f"output_dir={tmp_path / 'b'}", *window), callbacks=[first, InterruptAt(6)])
    assert first.steps_seen == 5
    second = Recorder()
    resumed = pretrain(config(f"output_dir={tmp_path / 'b'}", *window, "resume=latest"), callbacks=[second])
    assert second.steps_seen == 8  # 5 restored from the checkpoint, 3 more
    assert [(r["step"], r["loss"]) for r in records(resumed)] == [(r["step"], r["loss"]) for r in records(straight)]
    assert [r["step"] for r in records(straight)] == [3, 6, 8]


def test_two_callbacks_of_one_name_are_refused():
    with pytest.raises(ValueError, match="two callbacks are named Recorder"):
        CallbackList([Recorder(), Recorder()])
