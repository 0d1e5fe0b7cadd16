"""Rank 0's progress bar on a terminal (`logging.progress`: bar, lines, or auto), with the latest metrics line's
figures beside it."""

import shutil
import sys

from tqdm import tqdm

from cramming.train.callbacks import Callback, TrainState
from cramming.train.reporting import MetricsLogger, format_duration
from cramming.train.stopping import StoppingRule

RESOLUTION = 1000  # bar positions: per mille of training


def use_bar(mode: str, stream=None) -> bool:
    """logging.progress: bar, lines, or auto (a bar when the console is a terminal)."""
    stream = stream or sys.stderr
    return mode == "bar" or (mode == "auto" and stream.isatty())


class ProgressBar(Callback):
    """Rank 0's bar at the bottom of the terminal; the metrics lines are printed above it."""

    name = "progress_bar"

    def __init__(self, logger: MetricsLogger, stopping: StoppingRule, stream=None):
        self.logger, self.stopping, self.stream = logger, stopping, stream or sys.stderr
        self.bar: tqdm | None = None

    def on_train_start(self, state: TrainState) -> None:
        # A terminal that reports no size (a pseudo-terminal opened without one) would get a bar of zero
        # columns and rows, which tqdm draws as nothing: give it 100 x 20.
        size = {} if shutil.get_terminal_size((0, 0)).columns > 0 else {"ncols": 100, "nrows": 20}
        self.bar = tqdm(total=RESOLUTION, file=self.stream, dynamic_ncols=not size, leave=True,
                        bar_format="training {percentage:3.0f}%|{bar}| {desc}", **size)
        self._update(state)

    def after_step(self, state: TrainState) -> None:
        self._update(state)

    def on_train_end(self, state: TrainState, reason: str) -> None:
        self._update(state)
        self.close()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def _update(self, state: TrainState) -> None:
        if self.bar is None:
            return
        self.bar.n = round(RESOLUTION * self.stopping.fraction(state.progress.step))
        record = self.logger.last_record or {}
        shown = [f"step {state.progress.step}", f"{format_duration(state.clock.remaining)} left"]
        if "loss" in record:
            shown.append(f"loss {record['loss']:.4f}")
        if record.get("tokens_per_s"):
            shown.append(f"{record['tokens_per_s']:,.0f} tok/s")
        if record.get("mfu") is not None:
            shown.append(f"MFU {100 * record['mfu']:.1f}%")
        self.bar.set_description_str(" | ".join(shown), refresh=False)
        self.bar.refresh()
