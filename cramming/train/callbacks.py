"""Components that act at named points of training, like Composer's algorithms on events, and what they see
there: the TrainState (where training stands, progress.Progress, and what the step just did).

The loop calls every callback at each point around a step, in order; inside a step, the engine's step calls
only the callbacks that act there (`step_points`: techniques such as SAM). The trainer keeps what `state_dict`
returns in each checkpoint, so a resumed run restores it; the loop itself never changes. The metrics record, the
checkpoints and validation are callbacks; a training technique is one too, with the set-up events added
(cramming.train.techniques.base.Technique).
"""

from dataclasses import dataclass, fields
from pathlib import Path

import torch

from cramming.engine.step import Step, StepPoints, StepState
from cramming.train.nonfinite import NonFiniteSteps
from cramming.train.stopping import BudgetClock, Progress


@dataclass(kw_only=True)
class TrainState(StepState):
    """The training at one of the loop's named points; components read it and may act on the model. The step's
    own fields (the model, accumulate, and what the step just run left: its loss, microbatches, gradient norm and
    finite flag) are StepState's."""

    optimizer: torch.optim.Optimizer | None
    progress: Progress
    clock: BudgetClock | None
    run_dir: Path | None
    tokenizer: object = None  # the dataset's (transformers) tokenizer
    nonfinite: NonFiniteSteps | None = None  # the skipped steps' counts, on the device until read
    # the current step, set before it runs (with accumulate: the microbatches planned, on every rank)
    fraction: float = 0.0  # schedule progress f (StepState's lr: the learning rate at f)
    validation: dict | None = None  # figures of a validation just run, for the next metrics record


class Callback:
    """Override the points you need; all receive the TrainState. `name` names it; `state_key` (its name unless a
    kind of callback says otherwise) keys the state it checkpoints."""

    keeps_batches = False  # whether after_gradients needs the step's microbatches

    @property
    def name(self) -> str:
        return type(self).__name__

    @property
    def state_key(self) -> str:
        return self.name

    def on_train_start(self, state: TrainState) -> None:
        """After set-up (and a resume), just before the budget clock starts."""

    def before_step(self, state: TrainState) -> None:
        """An optimizer step is about to run; state.fraction, lr and accumulate are set."""

    def after_forward(self, state: TrainState, batch: dict, loss: torch.Tensor, output) -> torch.Tensor:
        """Each microbatch's loss before its backward; return it, or a changed one (e.g. distillation,
        importance weights). `output` is the model's (its logits), `batch` what the stream gave."""
        return loss

    def after_gradients(self, step: Step, state: TrainState, batches: list[dict], loss: torch.Tensor) -> torch.Tensor:
        """The step's gradients are accumulated and synchronized (not yet unscaled); return the step's loss. A
        technique may take the gradients again through `step` on `batches` (SAM; kept when `keeps_batches`)."""
        return loss

    def before_optimizer_step(self, state: TrainState) -> None:
        """Gradients are accumulated, synchronized, unscaled and clipped. With an on-device skip (the default
        fused AdamW) this runs on a non-finite step too, whose update the optimizer then skips:
        state.step_finite (on the device) tells; reading it waits for the GPU."""

    def after_optimizer_step(self, state: TrainState) -> None:
        """The weights have just changed (e.g. re-apply sparsity masks), unless state.step_finite is False."""

    def after_step(self, state: TrainState) -> None:
        """The step is counted in state.progress; state.step_* describe it."""

    def on_train_end(self, state: TrainState, reason: str) -> None:
        """The loop ended ("budget", "max_steps", "early_stop", or "interrupted" by a signal, whose
        checkpoint a resume continues from), before the final checkpoint."""

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        """Restore what state_dict returned (only called when it returned something)."""


# the points inside a step: StepPoints' lists of bound methods
STEP_POINTS = tuple(point.name for point in fields(StepPoints) if point.name != "keeps_batches")


def step_points(callbacks: list[Callback]) -> StepPoints | None:
    """The points inside a step at which these callbacks act (their own methods, not Callback's no-ops), for the
    engine's step to call in order; None where none acts inside a step (the default recipe)."""
    acting = {point: [getattr(callback, point) for callback in callbacks
                      if getattr(type(callback), point) is not getattr(Callback, point)] for point in STEP_POINTS}
    keeps_batches = any(callback.keeps_batches for callback in callbacks)
    if not any(acting.values()) and not keeps_batches:
        return None
    return StepPoints(**acting, keeps_batches=keeps_batches)


class CallbackList:
    """Calls each callback at each point outside a step, in the order given (the points inside one: step_points)."""

    def __init__(self, callbacks: list[Callback]):
        names = [callback.state_key for callback in callbacks]
        duplicated = sorted({name for name in names if names.count(name) > 1})
        if duplicated:
            raise ValueError(f"two callbacks are named {', '.join(duplicated)}; give each its own name")
        self.callbacks = list(callbacks)

    def on_train_start(self, state: TrainState) -> None:
        for callback in self.callbacks:
            callback.on_train_start(state)

    def before_step(self, state: TrainState) -> None:
        for callback in self.callbacks:
            callback.before_step(state)

    def after_step(self, state: TrainState) -> None:
        for callback in self.callbacks:
            callback.after_step(state)

    def on_train_end(self, state: TrainState, reason: str) -> None:
        for callback in self.callbacks:
            callback.on_train_end(state, reason)

    def state_dict(self) -> dict:
        states = {callback.state_key: callback.state_dict() for callback in self.callbacks}
        return {name: state for name, state in states.items() if state}

    def load_state_dict(self, states: dict) -> None:
        for callback in self.callbacks:
            if callback.state_key in states:
                callback.load_state_dict(states[callback.state_key])
