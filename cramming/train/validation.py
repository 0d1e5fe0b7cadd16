"""The validation curve: masked-LM loss and accuracy on the held-out rows of the dataset (the last
data.validation_rows of the stored order, never trained on), at fixed fractions of the budget and at the
end, and the optional early stop of a run whose validation loss is too high.

The slice and its masks are fixed (masks seeded by position with VALIDATION_SEED, whatever train.seed),
so runs on the same dataset are compared on the same tokens. Validation time is kept off the budget clock, and
so is the zero-shot probe that runs with it (BLiMP and bits per character: cramming.eval.probe).
"""

import logging
import time

import torch

from cramming.data.mlm import IGNORE_INDEX, MLMCollator, PackedRows, labels_at_logits
from cramming.data.store import PreparedDataset
from cramming.engine.precision import Precision
from cramming.train.callbacks import Callback, TrainState
from cramming.train.distributed import Distributed
from cramming.train.stopping import LocalAgreement

log = logging.getLogger("pretrain")
VALIDATION_SEED = 0
BATCH_SIZE = 32


@torch.no_grad()
def validate(model: torch.nn.Module, dataset: PreparedDataset, mlm_rate: float, precision: Precision | None = None,
             dist: Distributed | None = None, batch_size: int = BATCH_SIZE) -> dict[str, float]:
    """{"val_loss", "val_accuracy"} over the masked tokens of the held-out rows, the model in eval mode.
    Under torchrun each rank takes every world_size-th batch and the sums are reduced."""
    packed = PackedRows(dataset, held_out=True)
    collate = MLMCollator(dataset.meta["vocab_size"], mlm_rate=mlm_rate, seed=VALIDATION_SEED)
    device = next(model.parameters()).device
    rank, world = (dist.rank, dist.world_size) if dist is not None else (0, 1)
    was_training = model.training
    model.eval()
    sums = torch.zeros(3, dtype=torch.float64, device=device)  # loss x targets, correct, targets
    starts = range(dataset.training_rows, dataset.num_rows, batch_size)
    for start in list(starts)[rank::world]:
        batch = collate(packed.batch(start, min(batch_size, dataset.num_rows - start)))
        batch = {key: value.to(device) for key, value in batch.items()}
        with precision.autocast() if precision is not None else torch.autocast(device.type, enabled=False):
            out = model(**batch)
        labels = labels_at_logits(batch, out.logits)  # (B, k) with sparse prediction, else (B, T)
        targets = labels != IGNORE_INDEX
        count = targets.sum()
        sums += torch.stack([out.loss.double() * count, (out.logits.argmax(-1)[targets] == labels[targets]).sum(),
                             count]).double()
    model.train(was_training)
    if dist is not None:
        sums = dist.sum(sums)
    loss_sum, correct, targets = sums.tolist()
    return {"val_loss": loss_sum / targets, "val_accuracy": correct / targets}


class Validation(Callback):
    """Validates when training passes each of `fractions` of its progress and once at the end; the figures
    go into the next metrics record (state.validation). With `early_stop` (fraction, loss), a run whose
    validation loss at or after that fraction exceeds the loss stops there. Progress is the agreement's, the
    same on every rank (cramming.train.stopping): all ranks validate their shares at the same step."""

    name = "validation"

    def __init__(self, dataset: PreparedDataset, mlm_rate: float, precision: Precision, dist: Distributed,
                 agreement: LocalAgreement, fractions: list[float], early_stop: tuple[float, float] | None,
                 probe=None):
        self.dataset, self.mlm_rate, self.precision, self.dist = dataset, mlm_rate, precision, dist
        self.probe = probe  # a cramming.eval.probe.ZeroShotProbe, or None
        self.agreement, self.fractions, self.early_stop = agreement, sorted(fractions), early_stop
        self.passed: list[float] = []  # fractions validated at (kept in checkpoints)
        self.last_step = -1
        self.seconds: list[float] = []  # this process's validations, wall seconds each

    def after_step(self, state: TrainState) -> None:
        fraction = self.agreement.fraction(state.progress)
        due = [f for f in self.fractions if f <= fraction and f not in self.passed]
        if due:  # labelled where training is: a short run may pass 75% and 100% in one step
            self.passed += due
            self._run(state, "at the end" if fraction >= 1 else f"at {100 * fraction:.0f}% of training")
            self._check_early_stop(state, fraction)

    def on_train_end(self, state: TrainState, reason: str) -> None:
        if reason != "interrupted" and self.last_step != state.progress.step:
            self._run(state, "at the end")

    def expected_left_s(self) -> float | None:
        """Wall seconds the validations still to come are expected to take, at this process's mean so far (None:
        none measured yet, while some are to come)."""
        left = sum(f not in self.passed for f in self.fractions) + 1  # and the one at the end
        return left * sum(self.seconds) / len(self.seconds) if self.seconds else None

    def _run(self, state: TrainState, when: str) -> None:
        began = time.perf_counter()
        with state.clock.paused():
            state.validation = validate(state.model, self.dataset, self.mlm_rate, self.precision, self.dist)
            if self.probe is not None:  # every rank alike (no rank waits on another's)
                state.validation.update(self.probe(state.model, self.precision, when))
        self.last_step = state.progress.step
        self.seconds.append(time.perf_counter() - began)
        found = state.validation
        zero_shot = (f"; BLiMP {found['blimp']:.2f}%, {found['bits_per_char']:.4f} bits/char "
                     f"({found['zero_shot_s']:.1f} s)" if "blimp" in found else "")
        log.info("validation %s (step %d): loss %.4f, accuracy %.2f%%%s", when, state.progress.step,
                 found["val_loss"], 100 * found["val_accuracy"], zero_shot)

    def _check_early_stop(self, state: TrainState, fraction: float) -> None:
        if self.early_stop is None:
            return
        at, limit = self.early_stop
        loss = state.validation["val_loss"]
        if fraction >= at and loss > limit:
            self.agreement.stopping.stop_early(f"validation loss {loss:.4f} at {100 * fraction:.0f}% of training is "
                                               f"above train.validation.early_stop_loss={limit} (checked from "
                                               f"train.validation.early_stop_fraction={at})")

    def state_dict(self) -> dict:
        return {"passed": self.passed}

    def load_state_dict(self, state: dict) -> None:
        self.passed = list(state["passed"])
