"""Writing training checkpoints, atomically and on a cadence: the model (what `eval_glue.py` and `transformers`
read) and `trainer_state.pt` beside it (progress, optimizer, loss scaler, RNG, the callbacks' state, and the
fingerprint of the settings a resume must match). Restoring a run from one: cramming.train.resume.
"""

import dataclasses
import logging
import os
import shutil
from pathlib import Path

import torch
from torch import nn

from cramming.errors import CrammingError, free_space
from cramming.files import WriteFailed
from cramming.model.checkpoint import non_finite, save_pretrained
from cramming.train.callbacks import Callback, CallbackList, TrainState
from cramming.train.runs import FINAL, STATE_FILE, step_name
from cramming.train.techniques import optimizer_state_parts

log = logging.getLogger("pretrain")
def save_checkpoint(run_dir: Path, name: str, model: nn.Module, tokenizer, state: dict, keep_last: int,
                    provenance: dict | None = None, pinned: list[Path] = ()) -> Path:
    """Write into a temporary directory, then rename it into place; prune old step checkpoints (all but
    the newest `keep_last` and the `pinned` ones). A write that fails (a full disk) removes the temporary
    directory (a partial copy counts for nothing and keeps the disk full) and is a WriteFailed naming the
    checkpoint and the space left; the checkpoints already written are untouched."""
    root = run_dir / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    target, tmp, old = root / name, root / f".{name}.tmp", root / f".{name}.old"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        save_pretrained(model, tmp, tokenizer, provenance)
        write_state(state, tmp / STATE_FILE)
    except OSError as error:
        space = free_space(root)
        shutil.rmtree(tmp, ignore_errors=True)
        raise WriteFailed(f"cannot write the checkpoint {target}: {error.strerror or error} ({space}); its "
                          "partial copy is removed") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if target.exists():  # only `final` is ever rewritten (a resumed, finished run)
        shutil.rmtree(old, ignore_errors=True)
        os.rename(target, old)
    os.rename(tmp, target)
    shutil.rmtree(old, ignore_errors=True)
    steps = sorted(root.glob("step-*"))
    for stale in steps[:-keep_last] if keep_last > 0 else steps:
        if stale not in pinned:
            shutil.rmtree(stale, ignore_errors=True)
    return target


def write_state(state: dict, path: Path) -> None:
    """torch.save(state, path), where a full disk is the OSError it is: torch's zip writer turns a failed
    write's error into a RuntimeError ("unexpected pos"), so it writes through a file that remembers it."""

    class Remembering:
        error: OSError | None = None

        def write(self, data) -> int:
            try:
                return handle.write(data)
            except OSError as error:
                self.error = error
                raise

        def flush(self) -> None:
            handle.flush()

    file = Remembering()
    try:
        with open(path, "wb") as handle:
            torch.save(state, file)
    except RuntimeError:
        if file.error is None:
            raise
        raise file.error from None


def finite_optimizer_state(optimizer_state: dict) -> bool:
    """No NaN or inf in any moment, whatever layout the optimizer (or a technique's wrapper of it) keeps."""
    return not any(non_finite({name: _plain(value) for name, value in moments.items() if torch.is_tensor(value)})
                   for part in optimizer_state_parts(optimizer_state) for moments in part.get("state", {}).values())


def _plain(value: torch.Tensor) -> torch.Tensor:
    """A quantized optimizer state (torchao's 8-bit moments, a tensor subclass) as the values it stands for."""
    return value.dequantize() if type(value) is not torch.Tensor and hasattr(value, "dequantize") else value


class Checkpointer(Callback):
    """A checkpoint every `interval_minutes` of training (on the budget clock) and `final` at the end.

    Every rank keeps the cadence; rank 0 writes, with the state of every callback in `callbacks`. Nothing
    that may have diverged is written: no checkpoint while losses are non-finite, none with non-finite
    weights or optimizer state. A new checkpoint becomes `last_good` once the next step on its weights is
    applied (finite loss and gradient norm) and leaves finite weights; `last_good` is pinned against pruning,
    and if the run stops for non-finite steps, an unconfirmed newer checkpoint is removed
    (`discard_unconfirmed`), so the newest checkpoint left on disk is always a good one.
    """

    name = "checkpointer"

    def __init__(self, checkpoint_cfg, tokenizer, scaler: torch.amp.GradScaler, fingerprint: dict,
                 callbacks: CallbackList, is_main: bool, provenance: dict, last_good: Path | None = None,
                 progress: str = "budget"):
        self.finished = "max_steps" if progress == "steps" else "budget"  # the stop reason of a run trained to its end
        self.interval_s = checkpoint_cfg.interval_minutes * 60
        self.keep_last = checkpoint_cfg.keep_last
        self.keep_at = sorted(checkpoint_cfg.keep_at)  # progress fractions still to keep a checkpoint at
        self.started_at_step = 0
        self.tokenizer, self.scaler, self.fingerprint = tokenizer, scaler, fingerprint
        self.callbacks, self.is_main, self.provenance = callbacks, is_main, provenance
        self.last_at = 0.0
        self.last_good = last_good  # a resumed run starts from a good one
        self.unconfirmed: Path | None = None  # written, but no step has run on its weights yet
        self.newest: Path | None = last_good  # the last one written (or resumed from)

    def on_train_start(self, state: TrainState) -> None:
        self.last_at = state.clock.elapsed
        self.started_at_step = state.progress.step

    def after_step(self, state: TrainState) -> None:
        if (self.unconfirmed is not None and bool(state.step_finite)  # a host sync, once after each checkpoint
                and not non_finite(dict(state.model.named_parameters()))):
            self.last_good, self.unconfirmed = self.unconfirmed, None
        # keep_at: after the first step run at progress >= f. A resumed run whose first step is already past
        # f reached it before the interruption, and wrote that checkpoint then.
        resumed_past = self.started_at_step > 0 and state.progress.step == self.started_at_step + 1
        kept = None
        while self.keep_at and state.fraction >= self.keep_at[0]:
            fraction = self.keep_at.pop(0)
            if not resumed_past:
                kept = f"at-{fraction:g}-{step_name(state.progress.step)}"
                self.save(state, kept)
        if kept is None and state.clock.elapsed - self.last_at >= self.interval_s:
            self.save(state, step_name(state.progress.step))

    def on_train_end(self, state: TrainState, reason: str) -> None:
        """`final` when training is done; a step checkpoint to resume from when a signal stopped it. A keep_at
        fraction no step began at or after (the last steps are long) is kept from the end of a finished run, and
        said to be missing from a run that stopped early."""
        if self.keep_at and reason == self.finished:
            for fraction in self.keep_at:
                kept = f"at-{fraction:g}-{step_name(state.progress.step)}"
                log.warning("checkpoint.keep_at %g: no step began at or after it (the last began at %.1f%% of "
                            "training): kept the final weights as %s", fraction, 100 * state.fraction, kept)
                self.save(state, kept)
        elif self.keep_at and reason != "interrupted":
            log.warning("checkpoint.keep_at %s: not reached; the run stopped early (%s)",
                        ", ".join(f"{fraction:g}" for fraction in self.keep_at), reason)
        self.keep_at = []
        self.save(state, step_name(state.progress.step) if reason == "interrupted" else FINAL)

    def discard_unconfirmed(self) -> None:
        """After a divergence: remove the checkpoint whose weights led into it, if one was written."""
        if self.is_main and self.unconfirmed is not None:
            log.warning("removing %s: the steps after it diverged", self.unconfirmed)
            shutil.rmtree(self.unconfirmed, ignore_errors=True)
            self.unconfirmed = None

    def save(self, state: TrainState, name: str) -> None:
        self.last_at = state.clock.elapsed
        if not self.is_main:
            return
        state.nonfinite.read(state.progress, state.progress.step)  # the checkpoint's counts, exact
        healthy = (state.progress.nonfinite_in_a_row == 0 and not non_finite(dict(state.model.named_parameters()))
                   and finite_optimizer_state(state.optimizer.state_dict()))
        if not healthy:
            if name == FINAL:
                self.discard_unconfirmed()
                raise NonFiniteWeightsError(f"training ended at step {state.progress.step} with non-finite losses "
                                            "or weights: no final checkpoint")
            log.warning("step %d: non-finite steps or weights: no checkpoint written (the last good one: %s)",
                        state.progress.step, self.last_good or "none yet")
            return
        cuda = state.device.type == "cuda"
        trainer_state = {
            "progress": dataclasses.asdict(state.progress),
            "optimizer": state.optimizer.state_dict(),
            "scaler": self.scaler.state_dict(),
            "rng": {"torch": torch.get_rng_state(), "cuda": torch.cuda.get_rng_state(state.device) if cuda else None},
            "callbacks": self.callbacks.state_dict(),
            "fingerprint": self.fingerprint,
        }
        pinned = [path for path in (self.last_good, self.unconfirmed) if path is not None]
        try:
            with state.clock.aside():
                written = save_checkpoint(state.run_dir, name, state.model, self.tokenizer, trainer_state,
                                          self.keep_last, self.provenance, pinned)
        except WriteFailed as error:
            then = (f"the newest complete checkpoint is {self.newest}: free some space, then run the same "
                    f"command with resume={state.run_dir}" if self.newest else
                    "no checkpoint was written before it: free some space and start again")
            raise WriteFailed(f"{error}; {then}") from None
        self.newest = written
        if name == FINAL:
            self.last_good = written
        else:
            self.unconfirmed = written


class NonFiniteWeightsError(CrammingError):
    """Training ended with weights that are not finite: no final checkpoint is written."""
