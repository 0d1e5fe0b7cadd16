"""One training step, written once and read top to bottom in `Step.run`: pretraining (cramming.train.loop), GLUE
fine-tuning (cramming.eval.finetune) and the benchmark's timed step (cramming.bench.timing) all run it, so a speed
figure times what training runs, and a technique that changes the step (SAM) changes it for all three.

What differs between them acts at the step's named points (`StepHooks`), whose bodies live with each trainer:
pretraining's end a step early when the budget runs out, count skipped steps and let its techniques act.
"""

import contextlib
import time
from dataclasses import dataclass
from typing import Callable, Iterator

import torch

from cramming.data.stream import SAMPLE_KEYS
from cramming.engine.precision import Precision
from cramming.engine.schedules import set_lr


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


class StepHooks:
    """The named points of a step. These bodies are the plain step (GLUE fine-tuning, a benchmark without
    techniques); a trainer overrides the points it acts at (pretraining: cramming.train.loop.PretrainingHooks)."""

    keeps_batches = False  # whether `after_gradients` needs the step's microbatches (SAM runs them again)

    def another_microbatch(self, state: StepState) -> bool:
        """Asked before each microbatch after the first: False ends the step early (a budget that ran out)."""
        return True

    def after_forward(self, state: StepState, batch: dict, loss: torch.Tensor, output) -> torch.Tensor:
        """Each microbatch's loss before its backward, under autocast; return it or a changed one."""
        return loss

    def after_microbatch(self, state: StepState) -> None:
        """A microbatch's forward and backward ran."""

    def after_gradients(self, step: "Step", state: StepState, batches: list[dict], loss: torch.Tensor) -> torch.Tensor:
        """The step's gradients are summed (and synchronized); a technique may take them again on `batches`
        (kept when `keeps_batches`). Returns the step's loss."""
        return loss

    def judge(self, state: StepState, loss_finite: torch.Tensor, gradient_finite: torch.Tensor) -> torch.Tensor:
        """Whether the update applies, as a device flag (no host sync)."""
        return loss_finite & gradient_finite

    def before_optimizer_step(self, state: StepState) -> None:
        """Gradients are unscaled and clipped; with an on-device skip this runs on a non-finite step too."""

    def after_optimizer_step(self, state: StepState) -> None:
        """The weights have just changed, unless state.step_finite is False."""


class Step:
    """One optimizer step of `network` (the model as it runs: compiled, DDP-wrapped) on microbatches from `batches`,
    under `precision`. grad_clip: the max gradient norm (None: no clipping); skip_nonfinite: measure the norm and
    skip a step whose loss or gradients are not finite (GLUE's plain AdamW: False, and nothing is measured).
    dist: the ranks (None or not enabled: one process)."""

    def __init__(self, network: torch.nn.Module, optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler,
                 precision: Precision, batches: Iterator[dict], *, hooks: StepHooks | None = None,
                 grad_clip: float | None = None, skip_nonfinite: bool = True, dist=None):
        self.network, self.optimizer, self.scaler, self.precision = network, optimizer, scaler, precision
        self.batches, self.hooks = batches, hooks or StepHooks()
        self.grad_clip, self.skip_nonfinite = grad_clip, skip_nonfinite
        self.dist = dist if dist is not None and dist.enabled else None
        # Host seconds inside run() and, within it, waiting for batches: from the second step on (the first
        # compiles and warms up), and the first step's own; window_s: host seconds from the end of the first step
        # to the end of the latest, the `paused_seconds` run() is given left out (pretraining's validation). All
        # wall time, never the budget clock's (which a test may simulate), so the shares compare like with like.
        self.timing = {"steps": 0, "step_s": 0.0, "data_s": 0.0, "first_step_s": 0.0, "window_s": 0.0}
        self._first_ended = (0.0, 0.0)

    def run(self, state: StepState, paused_seconds: float = 0.0, *, update: bool = True) -> None:
        """Run the step state.accumulate plans; sets state.step_loss, step_microbatches, grad_norm, step_finite.
        paused_seconds: the caller's paused time so far, kept out of timing["window_s"]. update=False stops after
        the gradients (the benchmark counts their FLOPs)."""
        started, data_wait, hooks = time.perf_counter(), 0.0, self.hooks
        if state.lr is not None:  # the scheduler's value for this step
            set_lr(self.optimizer, state.lr)

        # Forward and backward over the step's microbatches, each gradient 1/accumulate of the step's; the ranks
        # synchronize gradients once, on the last. A budget that runs out ends the step after fewer.
        loss, done, kept = torch.zeros((), device=state.device), 0, []
        while done < state.accumulate and (done == 0 or hooks.another_microbatch(state)):
            waited = time.perf_counter()
            batch = {key: value.to(state.device, non_blocking=True) for key, value in next(self.batches).items()}
            data_wait += time.perf_counter() - waited
            loss += self.backward(state, batch, last=done + 1 == state.accumulate)
            if hooks.keeps_batches:
                kept.append(batch)
            done += 1
            hooks.after_microbatch(state)
        if done < state.accumulate:
            self.rescale(state, done)
            loss *= state.accumulate / done
        loss = self.mean(loss)
        state.step_loss = hooks.after_gradients(self, state, kept, loss)
        state.step_microbatches = done
        if not update:
            return

        # Unscale and clip; a non-finite loss or gradient norm leaves the weights and the optimizer state as they
        # were (a finite loss can still have non-finite gradients, weights near overflow, which would write NaN).
        state.grad_norm, state.step_finite = None, None
        clip = self.grad_clip if state.grad_clip is None else state.grad_clip
        if self.skip_nonfinite or clip is not None:
            self.scaler.unscale_(self.optimizer)
            # the norm before clipping, for the metrics record (left on the device: reading it would wait)
            state.grad_norm = torch.nn.utils.clip_grad_norm_(state.model.parameters(),
                                                             float("inf") if clip is None else clip)
        if self.skip_nonfinite:
            # under fp16 the loss scaler skips an overflowing step itself and lowers its scale: finite there
            gradient_finite = torch.isfinite(state.grad_norm) | self.scaler.is_enabled()
            state.step_finite = hooks.judge(state, torch.isfinite(state.step_loss), gradient_finite)

        # The optimizer step. torch's fused optimizers (the recipe's AdamW) skip their update inside the kernel
        # where `found_inf` is 1, as GradScaler drives them: a skipped step needs no host sync. Others are skipped
        # after the host reads the flag, which waits for the step.
        on_device = state.step_finite is not None and skips_on_device(self.optimizer)
        if state.step_finite is not None and not on_device and not state.step_finite:
            self.optimizer.zero_grad(set_to_none=True)
        else:
            hooks.before_optimizer_step(state)
            if on_device and not self.scaler.is_enabled():  # an enabled scaler sets found_inf itself
                self.optimizer.found_inf = (~state.step_finite).float()
                self.optimizer.step()
                del self.optimizer.found_inf
            else:
                self.scaler.step(self.optimizer)
            self.scaler.update()
            hooks.after_optimizer_step(state)
            self.optimizer.zero_grad(set_to_none=True)
        self._time(started, time.perf_counter(), data_wait, paused_seconds)

    def backward(self, state: StepState, batch: dict, last: bool) -> torch.Tensor:
        """One microbatch's forward and backward under the precision's autocast, its gradient added as
        1/accumulate of the step's; returns its loss / accumulate, detached (on the device: reading it would
        wait). Ranks synchronize gradients on the last."""
        sync = self.network.no_sync() if self.dist is not None and not last else contextlib.nullcontext()
        inputs = {key: value for key, value in batch.items() if key not in SAMPLE_KEYS}
        with sync:
            loss = backward(self.network, inputs, self.precision, self.scaler, divisor=state.accumulate,
                            on_output=lambda output: self.hooks.after_forward(state, batch, output.loss, output))
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


def skips_on_device(optimizer: torch.optim.Optimizer) -> bool:
    """Whether the optimizer skips a non-finite update inside its kernel (torch's fused ones)."""
    return getattr(optimizer, "_step_supports_amp_scaling", False)


def backward(model: torch.nn.Module, batch: dict, precision: Precision, scaler: torch.amp.GradScaler, *,
             divisor: int = 1, on_output: Callable | None = None) -> torch.Tensor:
    """One forward under the precision's autocast and one backward of loss / divisor (the gradient adds up as
    1/divisor of the step's). `on_output(output)` may replace the loss; it runs under autocast too. Returns the
    loss, detached (on the device: reading it would wait). The microbatch search's trial runs it alone."""
    with precision.autocast():
        output = model(**batch)
        loss = output.loss if on_output is None else on_output(output)
    scaler.scale(loss / divisor).backward()
    return loss.detach()
