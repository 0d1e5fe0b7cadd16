"""One training step's parts, written once: a microbatch's forward and backward, the gradients made the step's,
clipped, and the optimizer step with its on-device skip. GLUE fine-tuning (cramming.eval.finetune) and the
benchmark's timed step (cramming.bench.timing) run them whole through `Step.run`; pretraining's loop composes the
same parts in its own step function (cramming.train.loop.train_step), where it checks the budget between
microbatches and counts skipped steps itself. So a speed figure times what training runs.

The engine calls nothing above it. A technique that acts inside a step (SAM, distillation, sparsity masks)
reaches it as `StepPoints`: the bound methods of the techniques acting at each point, empty where none does.
"""

import contextlib
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator, Protocol

import torch

from cramming.data.stream import SAMPLE_KEYS
from cramming.engine.precision import Precision


@dataclass(kw_only=True)
class StepState:
    """What a step reads (the model, how many microbatches, the learning rate) and leaves (its loss, gradient
    norm, whether it applied). Pretraining's TrainState is one, with the run's progress added; the benchmark and
    fine-tuning make their own."""

    model: torch.nn.Module  # the plain model: not compiled, not wrapped by DDP
    device: torch.device
    accumulate: int = 1  # microbatches (on every rank) planned for the step
    lr: float | None = None  # set on the optimizer as the step begins (None: the caller's scheduler sets it)
    grad_clip: float | None = None  # the max gradient norm of this step (None: the Step's own grad_clip)
    step_loss: torch.Tensor | None = None  # mean loss, on the device (reading it would wait for the GPU)
    step_microbatches: int = 0  # microbatches run: fewer than planned when the budget ended mid-step
    grad_norm: torch.Tensor | None = None  # before clipping, on the device
    step_finite: torch.Tensor | None = None  # on the device: False when a non-finite loss or gradient skipped it


@dataclass
class StepPoints:
    """What techniques do inside a step, per point: the bound methods of those acting there, in order (empty where
    none does; cramming.train.callbacks.step_points picks them). A step without techniques calls nothing here."""

    # each microbatch's loss before its backward, under autocast: f(state, batch, loss, output) -> loss
    after_forward: list[Callable] = field(default_factory=list)
    # the step's gradients are summed and synchronized: f(step, state, kept batches, loss) -> the step's loss
    after_gradients: list[Callable] = field(default_factory=list)
    # gradients unscaled and clipped; with an on-device skip this runs on a non-finite step too: f(state)
    before_optimizer_step: list[Callable] = field(default_factory=list)
    # the weights have just changed, unless state.step_finite is False: f(state)
    after_optimizer_step: list[Callable] = field(default_factory=list)
    keeps_batches: bool = False  # whether an after_gradients point needs the step's microbatches (SAM)


class Ranks(Protocol):
    """The processes training together, as the step uses them (cramming.train.distributed.Distributed)."""

    enabled: bool

    def average_gradients(self, model: torch.nn.Module) -> None: ...

    def mean(self, value: torch.Tensor) -> torch.Tensor: ...


class Step:
    """One optimizer step of `network` (the model as it runs: compiled, DDP-wrapped) on microbatches from `batches`,
    under `precision`. grad_clip: the max gradient norm (None: no clipping); skip_nonfinite: measure the norm and
    skip a step whose loss or gradients are not finite (GLUE's plain AdamW: False, and nothing is measured).
    points: the techniques acting inside the step (None: none); dist: the ranks (None or not enabled: one process).

    The parts, in the order a step runs them: `begin`, `microbatch` (once or more), `gradients`, `clip`, `update`.
    """

    def __init__(self, network: torch.nn.Module, optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler,
                 precision: Precision, batches: Iterator[dict], *, points: StepPoints | None = None,
                 grad_clip: float | None = None, skip_nonfinite: bool = True, dist: Ranks | None = None):
        self.network, self.optimizer, self.scaler = network, optimizer, scaler
        # the precision's, made once and entered anew for each microbatch; torch's autocast keeps the state it
        # restores on itself, so it must never be entered twice at once (a hook may not call backward inside it)
        self.autocast = precision.autocast()
        self.batches, self.points = batches, points or StepPoints()
        self.grad_clip, self.skip_nonfinite = grad_clip, skip_nonfinite
        self.dist = dist if dist is not None and dist.enabled else None
        # Host seconds inside a step and, within it, waiting for batches: from the second step on (the first
        # compiles and warms up), and the first step's own; window_s: host seconds from the end of the first step
        # to the end of the latest, the `paused_seconds` update() is given left out (pretraining's validation). All
        # wall time, never the budget clock's (which a test may simulate), so the shares compare like with like.
        self.timing = {"steps": 0, "step_s": 0.0, "data_s": 0.0, "first_step_s": 0.0, "window_s": 0.0}
        self._first_ended = (0.0, 0.0)
        self._started, self._data_wait, self._kept = 0.0, 0.0, []

    def run(self, state: StepState, paused_seconds: float = 0.0, *, update: bool = True) -> None:
        """The whole step state.accumulate plans (GLUE fine-tuning, the benchmark); sets state.step_loss,
        step_microbatches, grad_norm, step_finite. paused_seconds: the caller's paused time so far, kept out of
        timing["window_s"]. update=False stops after the gradients (the benchmark counts their FLOPs)."""
        self.begin(state)
        while state.step_microbatches < state.accumulate:
            self.microbatch(state)
        self.gradients(state)
        if not update:
            return
        gradient_finite = self.clip(state)
        if gradient_finite is not None:
            state.step_finite = torch.isfinite(state.step_loss) & gradient_finite
        self.update(state, paused_seconds)

    def begin(self, state: StepState) -> None:
        """A step starts: its learning rate set on the optimizer (unless the caller's scheduler sets it), nothing
        run yet."""
        self._started, self._data_wait, self._kept = time.perf_counter(), 0.0, []
        if state.lr is not None:  # the scheduler's value for this step
            set_lr(self.optimizer, state.lr)
        state.step_loss, state.step_microbatches = torch.zeros((), device=state.device), 0
        state.grad_norm, state.step_finite = None, None

    def microbatch(self, state: StepState) -> None:
        """The next microbatch's forward and backward; its gradient adds up as 1/accumulate of the step's, and the
        ranks synchronize on the last planned one."""
        waited = time.perf_counter()
        batch = {key: value.to(state.device, non_blocking=True) for key, value in next(self.batches).items()}
        self._data_wait += time.perf_counter() - waited
        state.step_loss += self.backward(state, batch, last=state.step_microbatches + 1 == state.accumulate)
        if self.points.keeps_batches:
            self._kept.append(batch)
        state.step_microbatches += 1

    def gradients(self, state: StepState) -> None:
        """The microbatches are done: fewer than planned (a budget that ran out) count as their mean; the loss is
        averaged over the ranks, and techniques may take the gradients again (SAM)."""
        done = state.step_microbatches
        if done < state.accumulate:
            self.rescale(state, done)
            state.step_loss *= state.accumulate / done
        loss = self.mean(state.step_loss)
        for after_gradients in self.points.after_gradients:
            loss = after_gradients(self, state, self._kept, loss)
        state.step_loss, self._kept = loss, []

    def clip(self, state: StepState) -> torch.Tensor | None:
        """Unscale, measure the gradient norm and clip to the step's threshold; returns whether the gradients are
        finite, as a device flag (no host sync), or None where the step does not skip (nothing is measured then,
        unless it clips)."""
        clip = self.grad_clip if state.grad_clip is None else state.grad_clip
        if self.skip_nonfinite or clip is not None:
            self.scaler.unscale_(self.optimizer)
            # the norm before clipping, for the metrics record (left on the device: reading it would wait)
            state.grad_norm = torch.nn.utils.clip_grad_norm_(state.model.parameters(),
                                                             float("inf") if clip is None else clip)
        if not self.skip_nonfinite:
            return None
        # under fp16 the loss scaler skips an overflowing step itself and lowers its scale: finite there
        return torch.isfinite(state.grad_norm) | self.scaler.is_enabled()

    def update(self, state: StepState, paused_seconds: float = 0.0) -> None:
        """The optimizer step, unless state.step_finite (a device flag; None: always) says the step's loss or
        gradients were not finite: then the weights and the optimizer state stay as they were (a finite loss can
        still have non-finite gradients, weights near overflow, which would write NaN).

        torch's fused optimizers (the recipe's AdamW) skip their update inside the kernel where `found_inf` is 1,
        as GradScaler drives them: a skipped step needs no host sync. Others are skipped after the host reads the
        flag, which waits for the step."""
        on_device = state.step_finite is not None and skips_on_device(self.optimizer)
        if state.step_finite is not None and not on_device and not state.step_finite:
            self.optimizer.zero_grad(set_to_none=True)
        else:
            for before_optimizer_step in self.points.before_optimizer_step:
                before_optimizer_step(state)
            if on_device and not self.scaler.is_enabled():  # an enabled scaler sets found_inf itself
                self.optimizer.found_inf = (~state.step_finite).float()
                self.optimizer.step()
                del self.optimizer.found_inf
            else:
                self.scaler.step(self.optimizer)
            self.scaler.update()
            for after_optimizer_step in self.points.after_optimizer_step:
                after_optimizer_step(state)
            self.optimizer.zero_grad(set_to_none=True)
        self._time(self._started, time.perf_counter(), self._data_wait, paused_seconds)

    def backward(self, state: StepState, batch: dict, last: bool) -> torch.Tensor:
        """One microbatch's forward and backward under the precision's autocast, its gradient added as
        1/accumulate of the step's; returns its loss / accumulate, detached (on the device: reading it would
        wait). Ranks synchronize gradients on the last."""
        sync = self.network.no_sync() if self.dist is not None and not last else contextlib.nullcontext()
        inputs = {key: value for key, value in batch.items() if key not in SAMPLE_KEYS}
        on_output = None
        if self.points.after_forward:
            def on_output(output):
                loss = output.loss
                for after_forward in self.points.after_forward:
                    loss = after_forward(state, batch, loss, output)
                return loss
        with sync:
            loss = backward(self.network, inputs, self.autocast, self.scaler, divisor=state.accumulate,
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

    def mean(self, loss: torch.Tensor) -> torch.Tensor:
        """A loss averaged over the ranks (on the device)."""
        return loss if self.dist is None else self.dist.mean(loss)

    def _time(self, started: float, ended: float, data_wait: float, paused_seconds: float) -> None:
        self.timing["steps"] += 1
        if self.timing["steps"] == 1:
            self.timing["first_step_s"] = ended - started
            self._first_ended = (ended, paused_seconds)
            return
        self.timing["step_s"] += ended - started
        self.timing["data_s"] += data_wait
        first_ended, paused_then = self._first_ended
        self.timing["window_s"] = ended - first_ended - (paused_seconds - paused_then)


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    """The step's learning rate on every parameter group."""
    for group in optimizer.param_groups:
        if torch.is_tensor(group["lr"]):  # torchao's low-bit optimizers keep it a tensor (their compiled step reads it)
            group["lr"].fill_(lr)
        else:
            group["lr"] = lr


def skips_on_device(optimizer: torch.optim.Optimizer) -> bool:
    """Whether the optimizer skips a non-finite update inside its kernel (torch's fused ones)."""
    return getattr(optimizer, "_step_supports_amp_scaling", False)


def backward(model: torch.nn.Module, batch: dict, autocast: contextlib.AbstractContextManager,
             scaler: torch.amp.GradScaler, *, divisor: int = 1, on_output: Callable | None = None) -> torch.Tensor:
    """One forward under `autocast` (a Precision's, cramming.engine.precision) and one backward of loss / divisor
    (the gradient adds up as 1/divisor of the step's). `on_output(output)` may replace the loss; it runs under
    autocast too. Returns the loss, detached (on the device: reading it would wait). The microbatch search's trial
    runs it alone."""
    with autocast:
        output = model(**batch)
        loss = output.loss if on_output is None else on_output(output)
    scaler.scale(loss / divisor).backward()
    return loss.detach()
