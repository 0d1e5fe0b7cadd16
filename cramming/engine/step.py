"""One training step, written once: pretraining (cramming.train.loop), GLUE fine-tuning (cramming.eval.finetune)
and the benchmark's timed step (cramming.bench.timing) all run `Step`, so a speed figure times what training
runs, and a technique that changes the step (SAM) changes it for all three.

Its mechanics are the functions below: the precision policy a step runs under (`Precision`: autocast, loss
scaler), `backward` per microbatch, then `gradient_norm` (unscale, measure, clip) and `apply_update` (which a
non-finite step skips, on the device with a fused optimizer).
"""

import contextlib
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator, NamedTuple

import torch

from cramming.data.stream import SAMPLE_KEYS
from cramming.errors import CrammingError
from cramming.hardware import DTYPES


@dataclass(frozen=True)
class Precision:
    """fp32, or bf16/fp16 autocast on the GPU; fp16 with a loss scaler (its range is too small without)."""

    name: str  # fp32 | bf16 | fp16
    device_type: str  # cpu | cuda

    @classmethod
    def resolve(cls, name: str, device: torch.device, key: str) -> "Precision":
        """`auto` means bf16 on GPUs that have it, else fp16; fp32 on the CPU."""
        if name == "auto":
            name = "fp32" if device.type == "cpu" else "bf16" if torch.cuda.is_bf16_supported() else "fp16"
        if name not in DTYPES:
            raise CrammingError(f"{key}={name!r} must be auto, {', '.join(DTYPES)}")
        return cls(name, device.type)

    @property
    def dtype(self) -> torch.dtype:
        return DTYPES[self.name]

    def autocast(self):
        if self.name == "fp32":
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=self.dtype)

    def grad_scaler(self) -> torch.amp.GradScaler:
        """A pass-through scaler unless fp16: call scale/unscale_/step/update the same way in every precision."""
        return torch.amp.GradScaler(self.device_type, enabled=self.name == "fp16")


def backward(model: torch.nn.Module, batch: dict, precision: Precision, scaler: torch.amp.GradScaler, *,
             divisor: int = 1, on_output: Callable | None = None) -> torch.Tensor:
    """One forward under the precision's autocast and one backward of loss / divisor (the gradient adds up as
    1/divisor of the step's). `on_output(output)` may replace the loss (techniques' after_forward); it runs
    under autocast too. Returns the loss, detached (on the device: reading it would wait)."""
    with precision.autocast():
        output = model(**batch)
        loss = output.loss if on_output is None else on_output(output)
    scaler.scale(loss / divisor).backward()
    return loss.detach()


def gradient_norm(optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler, parameters,
                  max_norm: float | None) -> torch.Tensor:
    """Unscale the gradients, then clip them to max_norm (None: measure only). The global norm before
    clipping, left on the device."""
    scaler.unscale_(optimizer)
    return torch.nn.utils.clip_grad_norm_(parameters, max_norm or float("inf"))


def gradient_finite(norm: torch.Tensor, scaler: torch.amp.GradScaler) -> torch.Tensor:
    """Whether the gradients are finite, as a device flag. Under fp16 the loss scaler skips an overflowing
    step itself and lowers its scale, as it routinely does: always True there."""
    return torch.isfinite(norm) | scaler.is_enabled()


def skips_on_device(optimizer: torch.optim.Optimizer) -> bool:
    """torch's fused optimizers (the recipe's AdamW) skip their update inside the kernel where `found_inf` is
    1, as GradScaler drives them: a skipped step needs no host sync."""
    return getattr(optimizer, "_step_supports_amp_scaling", False)


def apply_update(optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler, finite: torch.Tensor | None = None,
                 *, before: Callable[[], None] | None = None, after: Callable[[], None] | None = None) -> None:
    """Step the optimizer, update the loss scaler, drop the gradients.

    finite: a device flag; where it is False the weights and the optimizer state stay as they were (fused
    optimizers skip on the device, the others after the host reads the flag, which waits for the step).
    None: always step (an fp16 scaler still skips an overflow). `before`/`after` run around the update
    (callbacks' before/after_optimizer_step); on a step skipped on the device they run too.
    """
    on_device = finite is not None and skips_on_device(optimizer)
    if finite is not None and not on_device and not finite:
        optimizer.zero_grad(set_to_none=True)
        return
    if before:
        before()
    if on_device and not scaler.is_enabled():  # an enabled scaler sets found_inf itself
        optimizer.found_inf = (~finite).float()
        optimizer.step()
        del optimizer.found_inf
    else:
        scaler.step(optimizer)
    scaler.update()
    if after:
        after()
    optimizer.zero_grad(set_to_none=True)


@dataclass(kw_only=True)
class StepState:
    """What a step reads (the model, how many microbatches) and leaves (its loss, gradient norm, whether it
    applied). Pretraining's TrainState is one, with the run's progress added; the benchmark and fine-tuning make
    their own."""

    model: torch.nn.Module  # the plain model: not compiled, not wrapped by DDP
    device: torch.device
    accumulate: int = 1  # microbatches (on every rank) planned for the step
    step_loss: torch.Tensor | None = None  # mean loss, on the device (reading it would wait for the GPU)
    step_microbatches: int = 0  # microbatches run: fewer than planned when the budget ended mid-step
    grad_norm: torch.Tensor | None = None  # before clipping, on the device
    step_finite: torch.Tensor | None = None  # on the device: False when a non-finite loss or gradient skipped it


class Gradients(NamedTuple):
    loss: torch.Tensor  # the step's mean loss over the microbatches that ran (and the ranks), on the device
    microbatches: int  # how many ran
    batches: list[dict]  # those microbatches, on the device, when asked for (a step that runs them twice)


def both_finite(state: StepState, loss_finite: torch.Tensor, gradient_finite: torch.Tensor) -> torch.Tensor:
    return loss_finite & gradient_finite


class Step:
    """One optimizer step, written once: pretraining (cramming.train.loop), the benchmark's timed step
    (cramming.bench.timing) and GLUE fine-tuning (cramming.eval.finetune) all run it, so a speed figure times
    what training runs. `run` = `gradients` (forward and backward over the step's microbatches, gradients
    synchronized across ranks once, on the last) then `update` (unscale, clip, judge finite, update).

    batches: where the microbatches come from (pretraining's stream, the benchmark's one batch repeated,
    fine-tuning's batches), moved to the device here. judge(state, loss finite, gradients finite): the device
    flag of whether the update applies (None: always, GLUE's plain AdamW); pretraining's also counts skipped steps.
    budget_ran_out(): asked before every microbatch after the first: a budget-driven run takes a shorter last step.
    on_microbatch(state): after each microbatch (pretraining counts it into its progress, which a simulated budget
    clock reads). A technique changes a step by wrapping it (StepWrapper); wrappers stack.
    """

    def __init__(self, network: torch.nn.Module, optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler,
                 precision: Precision, batches: Iterator[dict], *, grad_clip: float | None = None,
                 callbacks: Any = None, dist: Any = None, judge: Callable | None = both_finite,
                 budget_ran_out: Callable[[], bool] = lambda: False,
                 on_microbatch: Callable[[StepState], None] = lambda state: None):
        self.network, self.optimizer, self.scaler, self.precision = network, optimizer, scaler, precision
        self.batches, self.grad_clip, self.judge, self.budget_ran_out = batches, grad_clip, judge, budget_ran_out
        self.on_microbatch = on_microbatch
        self.callbacks, self.dist = callbacks, dist
        # Host seconds inside run() and, within it, waiting for batches: from the second step on (the first
        # compiles and warms up), and the first step's own; window_s: host seconds from the end of the first step
        # to the end of the latest, the `paused_seconds` run() is given left out (pretraining's validation). All wall time, never
        # the budget clock's (which a test may simulate), so the shares compare like with like.
        self.timing = {"steps": 0, "step_s": 0.0, "data_s": 0.0, "first_step_s": 0.0, "window_s": 0.0}
        self._first_ended = (0.0, 0.0)
        self.data_wait = 0.0  # in the current step

    def run(self, state: StepState, paused_seconds: float = 0.0) -> None:
        """Run the step state.accumulate plans; sets state.step_loss, step_microbatches, grad_norm, step_finite.
        paused_seconds: the caller's paused time so far, kept out of timing["window_s"]."""
        base = self.base
        started, base.data_wait = time.perf_counter(), 0.0
        gradients = self.gradients(state)
        state.step_loss, state.step_microbatches = gradients.loss, gradients.microbatches
        self.update(state, gradients.loss)
        base._time(started, time.perf_counter(), paused_seconds)

    @property
    def base(self) -> "Step":
        """The step that loads the batches and keeps the timing: this one, or the one a wrapper wraps."""
        return self

    def gradients(self, state: StepState, keep_batches: bool = False) -> Gradients:
        """Forward and backward up to state.accumulate microbatches; their mean loss (over the ranks too)."""
        done, kept = 0, []
        step_loss = torch.zeros((), device=state.device)
        while done < state.accumulate:
            if done and self.budget_ran_out():
                break
            waited = time.perf_counter()
            batch = {key: value.to(state.device, non_blocking=True) for key, value in next(self.batches).items()}
            self.data_wait += time.perf_counter() - waited
            step_loss += self.backward(state, batch, last=done + 1 == state.accumulate)
            if keep_batches:
                kept.append(batch)
            done += 1
            self.on_microbatch(state)
        if done < state.accumulate:
            self.rescale(state, done)
            step_loss *= state.accumulate / done
        return Gradients(self._mean(step_loss), done, kept)

    def backward(self, state: StepState, batch: dict, last: bool) -> torch.Tensor:
        """One microbatch's forward and backward, its gradient added as 1/accumulate of the step's; its loss /
        accumulate. Ranks synchronize gradients on the last."""
        distributed = self.dist is not None and self.dist.enabled
        sync = self.network.no_sync() if distributed and not last else contextlib.nullcontext()
        on_output = None
        if self.callbacks is not None:
            def on_output(output):
                return self.callbacks.after_forward(state, batch, output.loss, output)
        inputs = {key: value for key, value in batch.items() if key not in SAMPLE_KEYS}
        with sync:
            loss = backward(self.network, inputs, self.precision, self.scaler, divisor=state.accumulate,
                            on_output=on_output)
        return loss / state.accumulate

    def rescale(self, state: StepState, done: int) -> None:
        """Fewer microbatches than planned ran: their gradients as a mean over those. The last ran under no_sync,
        so ranks average here."""
        if self.dist is not None:
            self.dist.average_gradients(state.model)
        for parameter in state.model.parameters():
            if parameter.grad is not None:
                parameter.grad.mul_(state.accumulate / done)

    def update(self, state: StepState, step_loss: torch.Tensor) -> None:
        """Unscale, clip and update. A non-finite loss or gradient norm (as `judge` rules) leaves the weights and
        the optimizer state as they were."""
        if self.judge is None and self.grad_clip is None:
            # GLUE's plain update: nothing clips the gradients or reads their norm, so it is not computed
            state.grad_norm, state.step_finite = None, None
        else:
            # The norm before clipping, for the metrics record (left on the device: reading it would wait).
            state.grad_norm = gradient_norm(self.optimizer, self.scaler, state.model.parameters(), self.grad_clip)
            # A finite loss can still have non-finite gradients (weights near overflow): the update would write NaN.
            state.step_finite = None if self.judge is None else self.judge(
                state, torch.isfinite(step_loss), gradient_finite(state.grad_norm, self.scaler))
        callbacks = self.callbacks
        apply_update(self.optimizer, self.scaler, state.step_finite,
                     before=callbacks and (lambda: callbacks.before_optimizer_step(state)),
                     after=callbacks and (lambda: callbacks.after_optimizer_step(state)))

    def _mean(self, loss: torch.Tensor) -> torch.Tensor:
        return loss if self.dist is None else self.dist.mean(loss)

    def _time(self, started: float, ended: float, paused_seconds: float) -> None:
        self.timing["steps"] += 1
        if self.timing["steps"] == 1:
            self.timing["first_step_s"] = ended - started
            self._first_ended = (ended, paused_seconds)
            return
        self.timing["step_s"] += ended - started
        self.timing["data_s"] += self.data_wait
        first_ended, paused_then = self._first_ended
        self.timing["window_s"] = ended - first_ended - (paused_seconds - paused_then)


class StepWrapper(Step):
    """A step that changes another (a technique's `wrap_step`): it runs as a Step and, unless it overrides them,
    delegates `gradients`, `backward`, `rescale` and `update` to the step it wraps, which may be a wrapper too."""

    def __init__(self, inner: Step):  # Step.__init__ not called: the wrapped step holds the parts
        self.inner = inner

    def __getattr__(self, name: str):  # network, optimizer, scaler, dist, timing ... of the step within
        if name == "inner":  # not set yet (a copy being made, a bare __new__): no step within to ask
            raise AttributeError(name)
        return getattr(self.inner, name)

    @property
    def base(self) -> Step:
        return self.inner.base

    def gradients(self, state: StepState, keep_batches: bool = False) -> Gradients:
        return self.inner.gradients(state, keep_batches)

    def backward(self, state: StepState, batch: dict, last: bool) -> torch.Tensor:
        return self.inner.backward(state, batch, last)

    def rescale(self, state: StepState, done: int) -> None:
        self.inner.rescale(state, done)

    def update(self, state: StepState, step_loss: torch.Tensor) -> None:
        self.inner.update(state, step_loss)
