"""The budget is honest across crashes: every few seconds of training the budget used so far is written to
<run>/heartbeat.json (atomically), so a run killed between checkpoints still accounts for the compute it
lost, and its resume charges that time to the budget."""

import json
import logging
from pathlib import Path

import torch

from cramming.files import write_atomically
from cramming.train.callbacks import Callback
from cramming.train.state import Progress, TrainState

log = logging.getLogger("pretrain")
HEARTBEAT_FILE = "heartbeat.json"
INTERVAL_S = 10.0


class Heartbeat(Callback):
    """Rank 0 writes {"elapsed", "step"} at most every `interval_s` seconds of the budget clock (checked at
    every microbatch, so a long accumulation step is covered too)."""

    name = "heartbeat"

    def __init__(self, run_dir: Path, interval_s: float | None = None):
        self.path, self.written_at = run_dir / HEARTBEAT_FILE, float("-inf")
        self.interval_s = INTERVAL_S if interval_s is None else interval_s

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
