"""One optimizer step: forward and backward over the step's microbatches, then unscale, clip and update."""

import contextlib
import time

import torch

from cramming.data.stream import SAMPLE_KEYS
from cramming.gradient_step import apply_update, backward, gradient_finite, gradient_norm
from cramming.runtime import Precision
from cramming.train.callbacks import CallbackList
from cramming.train.distributed import Distributed
from cramming.train.state import TrainState
from cramming.train.stopping import LocalAgreement


class TrainStep:
    """Gradients of state.accumulate microbatches, synchronized across ranks once (on the last), then the
    update. A non-finite loss or gradient norm skips the update and is counted on the device
    (cramming.train.nonfinite): the step makes no host sync with the default fused AdamW.

    If a budget-driven run's clock expires mid-step, the step is taken with the microbatches done so far:
    their gradients (and loss) are rescaled to a mean over that smaller batch, so no compute is wasted.
    """

    keeps_batches = False  # True for a step that runs its microbatches twice (cramming.train.sam)

    def __init__(self, network: torch.nn.Module, scaler: torch.amp.GradScaler, precision: Precision,
                 dist: Distributed, stream, callbacks: CallbackList, agreement: LocalAgreement, train_cfg):
        self.network = network  # the model as it runs: compiled and/or wrapped by DDP
        self.scaler, self.precision, self.dist, self.stream = scaler, precision, dist, stream
        self.callbacks, self.agreement = callbacks, agreement
        self.grad_clip = train_cfg.optim.grad_clip
        # Host seconds inside run() and, within it, waiting for batches: this process, from its second step
        # on (the first compiles and warms up), and the first step's own; window_s: host seconds from the end
        # of the first step to the end of the latest, the clock's pauses (validation) left out. All wall time,
        # never the budget clock's (which a test may simulate), so the shares compare like with like.
        self.timing = {"steps": 0, "step_s": 0.0, "data_s": 0.0, "first_step_s": 0.0, "window_s": 0.0}
        self._first_ended = (0.0, 0.0)  # when the first step ended, and the clock's paused seconds then
        self.data_wait = 0.0  # in the current step
        self.batches: list[dict] = []  # the current step's microbatches, on the device, if keeps_batches

    def run(self, state: TrainState) -> None:
        """Run the step planned in state; sets state.step_loss, step_microbatches, grad_norm and step_finite."""
        started, self.data_wait = time.perf_counter(), 0.0
        state.step_loss, state.step_microbatches = self._accumulate(state)
        self._apply(state, state.step_loss)
        ended = time.perf_counter()
        self.timing["steps"] += 1
        if self.timing["steps"] == 1:
            self.timing["first_step_s"] = ended - started
            self._first_ended = (ended, state.clock.paused_seconds)
        else:
            self.timing["step_s"] += ended - started
            self.timing["data_s"] += self.data_wait
            first_ended, paused_then = self._first_ended
            self.timing["window_s"] = ended - first_ended - (state.clock.paused_seconds - paused_then)

    def _accumulate(self, state: TrainState) -> tuple[torch.Tensor, int]:
        """Forward and backward up to state.accumulate microbatches; the mean loss and how many ran."""
        device, done = state.device, 0
        step_loss = torch.zeros((), device=device)
        self.batches = []
        while done < state.accumulate:
            if done and self.agreement.budget_ran_out():
                break
            waited = time.perf_counter()
            batch = {key: value.to(device, non_blocking=True) for key, value in next(self.stream).items()}
            self.data_wait += time.perf_counter() - waited
            step_loss += self._backward(state, batch, last=done + 1 == state.accumulate)
            if self.keeps_batches:
                self.batches.append(batch)
            done += 1
            state.progress.microbatches += 1
        if done < state.accumulate:
            self._rescale_gradients(state, done)
            step_loss *= state.accumulate / done
        return self.dist.mean(step_loss), done

    def _backward(self, state: TrainState, batch: dict, last: bool) -> torch.Tensor:
        """One microbatch's forward and backward, its gradient added as 1/accumulate of the step's; its
        loss / accumulate. Ranks synchronize gradients on the last."""
        sync = contextlib.nullcontext() if last or not self.dist.enabled else self.network.no_sync()
        with sync:
            loss = backward(self.network, {key: value for key, value in batch.items() if key not in SAMPLE_KEYS},
                            self.precision, self.scaler, divisor=state.accumulate,
                            on_output=lambda output: self.callbacks.after_forward(state, batch, output.loss, output))
        return loss / state.accumulate

    def _rescale_gradients(self, state: TrainState, done: int) -> None:
        """Fewer microbatches than planned ran: their gradients as a mean over those. The last ran under
        no_sync, so ranks average here."""
        self.dist.average_gradients(state.model)
        for parameter in state.model.parameters():
            if parameter.grad is not None:
                parameter.grad.mul_(state.accumulate / done)

    def _apply(self, state: TrainState, step_loss: torch.Tensor) -> None:
        """Unscale, clip and update. A non-finite loss or gradient norm leaves the weights and the optimizer
        state as they were; it is counted on the device and read every few steps (cramming.train.nonfinite)."""
        # The norm before clipping, for the metrics record (left on the device: reading it would wait).
        state.grad_norm = gradient_norm(state.optimizer, self.scaler, state.model.parameters(), self.grad_clip)
        # A finite loss can still have non-finite gradients (weights near overflow): the update would write NaN
        # into the weights.
        state.step_finite = state.nonfinite.observe(torch.isfinite(step_loss),
                                                    gradient_finite(state.grad_norm, self.scaler),
                                                    state.progress.step + 1)
        apply_update(state.optimizer, self.scaler, state.step_finite,
                     before=lambda: self.callbacks.before_optimizer_step(state),
                     after=lambda: self.callbacks.after_optimizer_step(state))
