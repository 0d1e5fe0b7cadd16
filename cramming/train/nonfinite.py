"""A diverged run: its non-finite steps counted on the device, and what it tells its user.

Reading a step's flag as a Python bool makes the host wait for the GPU at every step, which then idles while
Python launches the next step's kernels. So the step only adds its flag to counters on the device; `settle` reads
them (one host sync) every `train.check_nonfinite_every` steps, before a metrics record or a checkpoint, and at
the end. A diverged run therefore stops at the first read after its limit was reached; the error still names the
step where it was reached, and the updates of the skipped steps in between were never applied (the optimizer
skips them on the device: cramming.engine.step).
"""

import logging
from pathlib import Path

import torch

from cramming.errors import CrammingError
from cramming.train.stopping import Progress

log = logging.getLogger("pretrain")

LOSS, GRADIENT, IN_A_ROW, LIMIT_AT = range(4)  # the counters' slots


class NonFiniteLossError(CrammingError):
    """Too many non-finite steps (loss or gradient norm) in a row: the run stops (after writing its summary)."""


class NonFiniteSteps:
    """Skipped steps since the last read (by cause), the running count in a row, and the first step at which
    that count reached `limit` (0: not yet); all on the device until `settle`."""

    def __init__(self, limit: int, every: int, device: torch.device, progress: Progress):
        self.limit, self.every = limit, every
        self.counts = torch.tensor([0, 0, progress.nonfinite_in_a_row, 0], device=device)  # int64
        self.read_after_step = progress.step  # the steps after it are not read yet
        self.limit_at = 0

    def observe(self, loss_finite: torch.Tensor, gradient_finite: torch.Tensor, step_number: int) -> torch.Tensor:
        """Count step `step_number` (1-based); returns its flag (True: applied), all without a host sync."""
        finite = loss_finite & gradient_finite
        in_a_row = (self.counts[IN_A_ROW] + 1) * (~finite)
        reached = (in_a_row >= self.limit) & (self.counts[LIMIT_AT] == 0)
        self.counts = torch.stack([
            self.counts[LOSS] + (~loss_finite),
            self.counts[GRADIENT] + (loss_finite & ~gradient_finite),
            in_a_row,
            torch.where(reached, step_number, self.counts[LIMIT_AT]),
        ])
        return finite

    def due(self, step_number: int) -> bool:
        """Whether the loop reads the counters after step `step_number` (every `every` steps)."""
        return step_number % self.every == 0

    def settle(self, progress: Progress, through_step: int) -> None:
        """`read`, then stop a run that reached the limit. Only the loop settles, at the same steps on every
        rank, so that all ranks stop together."""
        if self.read(progress, through_step):
            raise NonFiniteLossError(f"{self.limit} non-finite steps in a row at step {self.limit_at}: the run "
                                     "diverged and stopped")

    def read(self, progress: Progress, through_step: int) -> bool:
        """Read the counters into `progress` (steps up to `through_step` have run) and warn about the steps
        skipped since the last read; True once the limit was reached."""
        loss, gradient, in_a_row, self.limit_at = self.counts.tolist()
        first, self.read_after_step = self.read_after_step + 1, through_step
        self.counts[LOSS:IN_A_ROW] = 0  # the running count in a row goes on
        progress.nonfinite_total += loss + gradient
        progress.nonfinite_in_a_row = in_a_row
        if loss + gradient:
            log.warning("%s", _skipped_message(first, through_step, loss, gradient, in_a_row))
        return self.limit_at > 0


def _skipped_message(first: int, last: int, loss: int, gradient: int, in_a_row: int) -> str:
    if first == last:  # read every step: one line per skipped step, as the skip happened
        cause = "loss" if loss else "gradient norm"
        return f"step {last}: non-finite {cause}, step skipped ({in_a_row} in a row)"
    causes = ", ".join(f"{cause}: {count}" for cause, count in (("loss", loss), ("gradient norm", gradient)) if count)
    skipped = f"{loss + gradient} non-finite step{'s' if loss + gradient > 1 else ''}"
    return f"steps {first}-{last}: {skipped} skipped ({causes}), {in_a_row} in a row at step {last}"


def resume_advice(last_good: Path | None) -> str:
    """The learning rate is blamed (an init far above the recipe's is refused before training: arch.init_std):
    go on from the last good checkpoint with a lower one, or start again with one."""
    if last_good is None:
        return "no checkpoint was written before it diverged: start again with a lower train.optim.lr"
    return (f"the last good checkpoint is {last_good}; to go on from it with a lower learning rate, run the same "
            f"command with resume={last_good} train.optim.lr=<lower>")
