"""The mechanics of one training step, written once: pretraining's step (cramming.train.step), GLUE
fine-tuning and the benchmark's timed step (cramming.bench.timing) all run these, so a speed figure times
what training runs.

A step is `backward` per microbatch, then `gradient_norm` (unscale, measure, clip) and `apply_update`.
"""

from typing import Callable

import torch

from cramming.runtime import Precision


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
