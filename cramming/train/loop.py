"""The training loop: pick the step's lr and batch for the current progress, run the step, let the components
act, until the stopping rule says so. Everything else (logging, checkpoints, techniques) is a callback.

`train_step` is pretraining's step, read top to bottom: it composes the engine's parts (cramming.engine.step,
which GLUE fine-tuning and the benchmark run whole) and does pretraining's own work between them itself: the
budget check between microbatches, the count of microbatches the budget clock reads, the non-finite counter."""

from dataclasses import dataclass

import torch

from cramming.engine.schedules import accumulation_steps, clip_threshold, fitted_batch_size, lr_multiplier
from cramming.engine.step import Step
from cramming.train.callbacks import CallbackList, TrainState
from cramming.train.stopping import LocalAgreement


@dataclass
class Schedule:
    """The recipe's schedules at progress f: the learning rate and the batch (as microbatches to accumulate).
    With train.min_steps the ramp's final batch follows the sequences the run is expected to see (`observe`)."""

    train_cfg: object  # the `train` config
    sequences_per_microbatch: int  # across all ranks
    expected_sequences: float = 0.0  # the whole run's, projected from its pace so far (observe)

    def lr(self, fraction: float) -> float:
        """The peak lr times the schedule's multiplier at f; with train.lr_batch_exponent e, times
        (train.batch_size / the final batch)^e: a higher peak where train.min_steps keeps the batch small."""
        train = self.train_cfg
        scale = (train.batch_size / self.final_batch()) ** train.lr_batch_exponent if train.lr_batch_exponent else 1.0
        return train.optim.lr * scale * lr_multiplier(train.lr_schedule, fraction, train.warmup_fraction)

    def grad_clip(self, fraction: float) -> float | None:
        train = self.train_cfg
        multiplier = lr_multiplier(train.lr_schedule, fraction, train.warmup_fraction)
        return clip_threshold(train.optim.clip_schedule, train.optim.grad_clip, multiplier)

    def observe(self, fraction: float, sequences_done: float) -> None:
        """Project the run's sequences from its pace so far, compilation included (so early on, an
        underestimate: small batches). Both numbers are agreed by the ranks, so every rank plans alike, and both
        are in a checkpoint's progress, so a resumed run plans as the uninterrupted one would have."""
        if fraction > 0:
            self.expected_sequences = sequences_done / fraction

    def final_batch(self) -> float:
        """Sequences per step once the ramp is done: train.batch_size, or what train.min_steps leaves (budget
        runs; a run counting steps has its max_steps)."""
        train = self.train_cfg
        if train.min_steps is None or train.progress == "steps":
            return float(train.batch_size)
        return fitted_batch_size(self.expected_sequences, self.sequences_per_microbatch, train.batch_size,
                                 train.min_steps)

    def accumulate(self, fraction: float) -> int:
        train = self.train_cfg
        return accumulation_steps(fraction, self.sequences_per_microbatch, self.final_batch(),
                                  train.batch_ramp_fraction)


def train_step(state: TrainState, step: Step, agreement: LocalAgreement) -> None:
    """One optimizer step of the accumulation state.accumulate plans, ended after fewer microbatches when the
    budget runs out (decided alike on every rank: cramming.train.stopping). A step whose loss or gradients are not
    finite is counted on the device, without a host sync (cramming.train.nonfinite), and changes nothing."""
    step.begin(state)
    while state.step_microbatches < state.accumulate and (state.step_microbatches == 0
                                                          or not agreement.budget_ran_out()):
        step.microbatch(state)
        state.progress.microbatches += 1  # the position in the data stream, which a simulated budget clock reads
    step.gradients(state)
    gradient_finite = step.clip(state)
    state.step_finite = state.nonfinite.observe(torch.isfinite(state.step_loss), gradient_finite,
                                                state.progress.step + 1)
    step.update(state, state.clock.paused_seconds)


def run_loop(state: TrainState, step: Step, agreement: LocalAgreement, schedule: Schedule,
             callbacks: CallbackList, tokens_per_microbatch: int) -> str:
    """Train until the budget, max_steps or a signal; returns which ("budget", "max_steps", "interrupted").
    Every decision ranks must share comes from the agreement (cramming.train.stopping), so ranks step alike."""
    progress = state.progress
    callbacks.on_train_start(state)
    state.clock.start()
    while not agreement.should_stop(progress):
        state.fraction = agreement.fraction(progress)
        schedule.observe(state.fraction, progress.tokens / tokens_per_microbatch * schedule.sequences_per_microbatch)
        state.lr, state.accumulate = schedule.lr(state.fraction), schedule.accumulate(state.fraction)
        state.grad_clip = schedule.grad_clip(state.fraction)
        callbacks.before_step(state)
        train_step(state, step, agreement)
        if state.nonfinite.due(progress.step + 1):  # may stop a diverged run (nonfinite.NonFiniteSteps)
            state.nonfinite.settle(progress, progress.step + 1)
        progress.step += 1
        progress.tokens += state.step_microbatches * tokens_per_microbatch
        progress.elapsed = state.clock.elapsed
        callbacks.after_step(state)
    progress.elapsed = state.clock.elapsed
    state.nonfinite.settle(progress, progress.step)
    reason = agreement.stopping.reason(progress.step)
    callbacks.on_train_end(state, reason)
    return reason
