"""Training checkpoints: writing them (atomically, on a cadence), and restoring a run from one.

A checkpoint directory `checkpoints/step-00001234/` (or `final/`) is what `eval_glue.py` and `transformers`
read, plus `trainer_state.pt` (progress, optimizer, loss scaler, RNG, the callbacks' state, and the
fingerprint of the settings a resume must match), loaded with `torch.load(weights_only=True)`: no code is
ever unpickled.
"""

import copy
import dataclasses
import json
import logging
import os
import pickle
import shutil
import warnings
from pathlib import Path

import torch
from omegaconf import OmegaConf
from torch import nn

from cramming.data.sources import DataConfig
from cramming.errors import CrammingError, free_space
from cramming.files import WriteFailed, write_atomically
from cramming.model import build_mlm_model
from cramming.model.checkpoint import (check_declared_shapes, declared_sizes, load_weights, non_finite,
                                       read_weights, save_pretrained)
from cramming.model.config import ModelConfig, as_model_config
from cramming.runs import FINAL, STATE_FILE, differences, flatten, step_name
from cramming.train.callbacks import Callback, CallbackList, TrainState
from cramming.train.config import TrainConfig
from cramming.train.stopping import Progress
from cramming.train.techniques import optimizer_state_parts

log = logging.getLogger("pretrain")
RESUME_MUST_MATCH = ("arch", "data", "train")
# What a resume may change of the fingerprinted settings: the way out of a diverged run is its last good
# checkpoint with a lower lr; a larger max_steps extends a run on purpose; data.files names the same files moved.
RESUME_MAY_CHANGE = (("train", "optim", "lr"), ("train", "max_nonfinite_steps"),
                     ("train", "check_nonfinite_every"), ("train", "max_steps"), ("data", "files"))


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


STATE_KEYS = {"progress", "optimizer", "scaler", "rng", "callbacks", "fingerprint"}
REQUIRED_PROGRESS = {"step", "microbatches", "tokens", "elapsed"}  # later fields have defaults


def load_state(checkpoint: Path) -> dict:
    """The trainer state of a checkpoint, loaded without running any code; one line if it is not ours."""
    path = checkpoint / STATE_FILE
    try:
        with warnings.catch_warnings():  # torch's warnings about a foreign file's pickle protocol: ours says it
            warnings.simplefilter("ignore")
            state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:  # objects that could run code on loading: never loaded
        raise CrammingError(f"cannot read {path}: it holds Python objects other than tensors and plain values, "
                            "so it was not written by this program; it is not loaded") from None
    except Exception as error:  # truncated, damaged, or not a torch file
        raise CrammingError(f"cannot read {path}: truncated or damaged ({type(error).__name__})") from None
    missing = STATE_KEYS - set(state) if isinstance(state, dict) else STATE_KEYS
    progress = {field.name for field in dataclasses.fields(Progress)}
    if missing or not isinstance(state["progress"], dict) or not REQUIRED_PROGRESS <= set(state["progress"]) <= progress:
        what = f"missing {', '.join(sorted(missing))}" if missing else "its progress has other fields"
        raise CrammingError(f"{path} is not a trainer state of this version ({what})")
    return state


def finite_optimizer_state(optimizer_state: dict) -> bool:
    """No NaN or inf in any moment, whatever layout the optimizer (or a technique's wrapper of it) keeps."""
    return not any(non_finite({name: _plain(value) for name, value in moments.items() if torch.is_tensor(value)})
                   for part in optimizer_state_parts(optimizer_state) for moments in part.get("state", {}).values())


def _plain(value: torch.Tensor) -> torch.Tensor:
    """A quantized optimizer state (torchao's 8-bit moments, a tensor subclass) as the values it stands for."""
    return value.dequantize() if type(value) is not torch.Tensor and hasattr(value, "dequantize") else value


def resume_fingerprint(cfg, microbatch_size: int, world_size: int) -> dict:
    """What a resumed run must share with its checkpoint for the continuation to be exact."""
    sections = {key: OmegaConf.to_container(cfg[key], resolve=True) for key in RESUME_MUST_MATCH}
    return {**sections, "microbatch_size": microbatch_size, "world_size": world_size}


def _schema_defaults() -> dict:
    """The schema defaults of the fingerprinted sections (those with any: arch and train; data's too)."""
    return {key: OmegaConf.to_container(OmegaConf.structured(schema)) for key, schema in
            (("arch", ModelConfig), ("data", DataConfig), ("train", TrainConfig))}


def restore(checkpoint: Path, saved: dict, fingerprint: dict, resume: str, model: nn.Module,
            optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler, device: torch.device) -> Progress:
    """Put model, optimizer, scaler and RNG back as `saved` (the checkpoint's trainer state) has them."""
    ours, theirs = copy.deepcopy(fingerprint), copy.deepcopy(saved["fingerprint"])
    for path in RESUME_MAY_CHANGE:
        before, now = _pop(theirs, path), _pop(ours, path)
        if before != now:
            log.warning("resume: %s changed from %s to %s", ".".join(path), before, now)
    check_same_settings(theirs, ours, resume)
    load_weights(model, read_weights(checkpoint), checkpoint)
    if not finite_optimizer_state(saved["optimizer"]):
        raise CrammingError(f"resume={resume}: the optimizer state in {checkpoint} is not finite (the run diverged "
                            "before it was written); resume from an earlier checkpoint")
    try:
        optimizer.load_state_dict(saved["optimizer"])
    except (ValueError, KeyError) as error:
        raise CrammingError(f"resume={resume}: the optimizer state in {checkpoint} does not fit this model "
                            f"({error})") from None
    if saved["scaler"]:
        scaler.load_state_dict(saved["scaler"])
    torch.set_rng_state(saved["rng"]["torch"])
    if device.type == "cuda" and saved["rng"]["cuda"] is not None:
        torch.cuda.set_rng_state(saved["rng"]["cuda"], device)
    return Progress(**saved["progress"])


def check_same_settings(theirs: dict, ours: dict, resume: str) -> None:
    """The fingerprinted settings (or a part of them) of a checkpoint and of its resume are the same; a key
    the checkpoint predates is fine at its default (what the older code did without it)."""
    defaults = flatten(_schema_defaults())
    differing = [(key, before, now) for key, before, now in differences(theirs, ours)
                 if not (before == "(absent)" and key in defaults and now == defaults[key])]
    if differing:
        shown = "; ".join(f"{key}: {before} in the checkpoint, {now} now" for key, before, now in differing[:3])
        raise CrammingError(f"resume={resume}: the settings differ from the checkpoint's ({shown}"
                            f"{'; ...' if len(differing) > 3 else ''}); resume with the same settings, or start a new run")


def check_resumed_model(checkpoint: Path, saved: dict, cfg, vocab_size: int) -> None:
    """Before the model a resume trains is given memory: its arch is the one the checkpoint trained (the
    fingerprint in its trainer state), and its weights' shapes are those in its model.safetensors."""
    arch = as_model_config(cfg.arch)
    check_same_settings({"arch": saved["fingerprint"].get("arch", {})},
                        {"arch": OmegaConf.to_container(cfg.arch, resolve=True)}, cfg.resume)
    check_declared_shapes(checkpoint, lambda: build_mlm_model(arch, vocab_size),
                          declared_sizes(arch, vocab_size), "the config this resume trains with")


def _pop(tree: dict, path: tuple[str, ...]):
    """Remove and return the value at `path` of a nested dict."""
    for key in path[:-1]:
        tree = tree.get(key, {})
    return tree.pop(path[-1], None)


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


log = logging.getLogger("pretrain")
HEARTBEAT_FILE = "heartbeat.json"
HEARTBEAT_INTERVAL_S = 10.0


class Heartbeat(Callback):
    """Rank 0 writes {"elapsed", "step"} at most every `interval_s` seconds of the budget clock (checked at
    every microbatch, so a long accumulation step is covered too)."""

    name = "heartbeat"

    def __init__(self, run_dir: Path, interval_s: float | None = None):
        self.path, self.written_at = run_dir / HEARTBEAT_FILE, float("-inf")
        self.interval_s = HEARTBEAT_INTERVAL_S if interval_s is None else interval_s

    def on_train_start(self, state: TrainState) -> None:
        self._beat(state)

    def after_forward(self, state: TrainState, batch: dict, loss: torch.Tensor, output) -> torch.Tensor:
        if state.clock.elapsed - self.written_at >= self.interval_s:
            self._beat(state)
        return loss

    def on_train_end(self, state: TrainState, reason: str) -> None:
        self._beat(state)

    def _beat(self, state: TrainState) -> None:
        self.written_at = state.clock.elapsed
        write_atomically(self.path, json.dumps({"elapsed": round(self.written_at, 3), "step": state.progress.step}))


def charge_lost_time(run_dir: Path, progress: Progress) -> float:
    """On a resume into `run_dir`: charge the training its heartbeat shows beyond the checkpoint. Returns
    the seconds charged (0 if none or no heartbeat)."""
    path = run_dir / HEARTBEAT_FILE
    try:
        elapsed = float(json.loads(path.read_text())["elapsed"])
    except (OSError, ValueError, KeyError, TypeError):  # none yet, or torn by a kill mid-write: nothing to charge
        return 0.0
    lost = max(elapsed - progress.elapsed, 0.0)
    if lost > 0:
        progress.elapsed += lost
        progress.lost_to_crashes += lost
        log.warning("resume: %.1f s of training after the checkpoint were lost; charged to the budget", lost)
    return lost
