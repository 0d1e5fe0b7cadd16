"""Training checkpoints: writing them (atomically, on a cadence), and restoring a run from one.

A checkpoint directory `checkpoints/step-00001234/` (or `final/`) is what `eval_glue.py` and `transformers`
read, plus `trainer_state.pt` (progress, optimizer, loss scaler, RNG, the callbacks' state, and the
fingerprint of the settings a resume must match), loaded with `torch.load(weights_only=True)`: no code is
ever unpickled.
"""

import dataclasses
import os
import shutil
from pathlib import Path

import torch
from omegaconf import OmegaConf
from torch import nn

from cramming.errors import CrammingError
from cramming.model.checkpoint import read_weights, save_pretrained
from cramming.runs import FINAL, STATE_FILE, step_name
from cramming.train.callbacks import Callback, CallbackList
from cramming.train.plots import plot_run
from cramming.train.state import Progress, TrainState

RESUME_MUST_MATCH = ("arch", "data", "train")


def save_checkpoint(run_dir: Path, name: str, model: nn.Module, tokenizer, state: dict, keep_last: int,
                    provenance: dict | None = None) -> Path:
    """Write into a temporary directory, then rename it into place; prune old step checkpoints."""
    root = run_dir / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    target, tmp, old = root / name, root / f".{name}.tmp", root / f".{name}.old"
    shutil.rmtree(tmp, ignore_errors=True)
    save_pretrained(model, tmp, tokenizer, provenance)
    torch.save(state, tmp / STATE_FILE)
    if target.exists():  # only `final` is ever rewritten (a resumed, finished run)
        shutil.rmtree(old, ignore_errors=True)
        os.rename(target, old)
    os.rename(tmp, target)
    shutil.rmtree(old, ignore_errors=True)
    steps = sorted(root.glob("step-*"))
    for stale in steps[:-keep_last] if keep_last > 0 else steps:
        shutil.rmtree(stale, ignore_errors=True)
    return target


def load_state(checkpoint: Path) -> dict:
    try:
        return torch.load(checkpoint / STATE_FILE, map_location="cpu", weights_only=True)
    except Exception as error:  # a truncated or foreign file
        raise CrammingError(f"cannot read {checkpoint / STATE_FILE}: {error}") from None


def resume_fingerprint(cfg, microbatch_size: int, world_size: int) -> dict:
    """What a resumed run must share with its checkpoint for the continuation to be exact."""
    sections = {key: OmegaConf.to_container(cfg[key], resolve=True) for key in RESUME_MUST_MATCH}
    return {**sections, "microbatch_size": microbatch_size, "world_size": world_size}


def restore(checkpoint: Path, saved: dict, fingerprint: dict, resume: str, model: nn.Module,
            optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler, device: torch.device) -> Progress:
    """Put model, optimizer, scaler and RNG back as `saved` (the checkpoint's trainer state) has them."""
    differing = [key for key in fingerprint if saved["fingerprint"].get(key) != fingerprint[key]]
    if differing:
        raise CrammingError(
            f"resume={resume}: this run's {', '.join(differing)} differ from the checkpoint's; "
            "resume with the same settings (or start a new run)"
        )
    model.load_state_dict(read_weights(checkpoint))
    optimizer.load_state_dict(saved["optimizer"])
    if saved["scaler"]:
        scaler.load_state_dict(saved["scaler"])
    torch.set_rng_state(saved["rng"]["torch"])
    if device.type == "cuda" and saved["rng"]["cuda"] is not None:
        torch.cuda.set_rng_state(saved["rng"]["cuda"], device)
    return Progress(**saved["progress"])


class Checkpointer(Callback):
    """A checkpoint every `interval_minutes` of training (on the budget clock) and `final` at the end.

    Every rank keeps the cadence; rank 0 writes, with the state of every callback in `callbacks`.
    """

    name = "checkpointer"

    def __init__(self, checkpoint_cfg, tokenizer, scaler: torch.amp.GradScaler, fingerprint: dict,
                 callbacks: CallbackList, is_main: bool, provenance: dict):
        self.interval_s = checkpoint_cfg.interval_minutes * 60
        self.keep_last = checkpoint_cfg.keep_last
        self.tokenizer, self.scaler, self.fingerprint = tokenizer, scaler, fingerprint
        self.callbacks, self.is_main, self.provenance = callbacks, is_main, provenance
        self.last_at = 0.0

    def on_train_start(self, state: TrainState) -> None:
        self.last_at = state.clock.elapsed

    def after_step(self, state: TrainState) -> None:
        if state.clock.elapsed - self.last_at >= self.interval_s:
            self.save(state, step_name(state.progress.step))

    def on_train_end(self, state: TrainState, reason: str) -> None:
        self.save(state, FINAL)

    def save(self, state: TrainState, name: str) -> None:
        self.last_at = state.clock.elapsed
        if not self.is_main:
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
        save_checkpoint(state.run_dir, name, state.model, self.tokenizer, trainer_state, self.keep_last,
                        self.provenance)
        if name != FINAL:  # the end of the run draws its own, whatever way it ends
            plot_run(state.run_dir)
