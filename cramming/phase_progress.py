"""The progress of a long phase, in one style across the commands: a validation and its zero-shot probe, the
zero_shot command's BLiMP, each fine-tuning epoch and its evaluation, an export's checks, a tokenizer's training.

On a terminal, a bar that redraws in place (shown once the phase has run a second, gone when it ends). Anywhere
else (a log file, a pipe) a line at most every EVERY_S seconds (CRAMMING_PROGRESS_EVERY_S sets it) once the phase
has run that long, so a short phase stays silent and a long one is never silent for longer:

    validation at 50% of training: 40% (2,680 of 6,700 rows), 12 s, about 18 s left

A phase that said how it went says where it ended when it closes; its result is the caller's to say.
"""

import logging
import os
import sys
import time

from tqdm import tqdm


EVERY_S = float(os.environ.get("CRAMMING_PROGRESS_EVERY_S") or 10.0)  # seconds between the lines off a terminal
BAR_DELAY_S = 1.0  # a terminal's bar appears after this long


def duration_text(seconds: float) -> str:
    """12 s, 3m05s, 1h02m."""
    seconds = max(seconds, 0.0)
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes, seconds = divmod(round(seconds), 60)
    return f"{minutes}m{seconds:02d}s" if minutes < 60 else f"{minutes // 60}h{minutes % 60:02d}m"


class PhaseProgress:
    """`what` advancing through `total` `unit`s: `advance(n)` as they are done, `close()` at the end (also as a
    context manager). A total of None shows the count and rate without a percentage."""

    def __init__(self, what: str, total: int | None, unit: str, log: logging.Logger, stream=None,
                 every_s: float | None = None, clock=time.perf_counter):
        self.what, self.total, self.unit, self.log, self.clock = what, total, unit, log, clock
        self.every_s = EVERY_S if every_s is None else every_s
        self.done, self.started = 0, clock()
        self.note = ""  # said after the count, e.g. the tokens packed so far
        self.lines = 0  # lines said off a terminal
        self.said_at = self.started
        stream = stream or sys.stderr
        self.bar = tqdm(total=total, desc=what, unit=f" {unit}", unit_scale=True, file=stream, delay=BAR_DELAY_S,
                        leave=False, dynamic_ncols=True, mininterval=0.5) if _is_terminal(stream) else None

    def advance(self, count: int = 1) -> None:
        self.done += count
        if self.bar is not None:
            self.bar.update(count)
            if self.note:
                self.bar.set_postfix_str(self.note, refresh=False)
            return
        now = self.clock()
        if now - self.said_at >= self.every_s:
            self._say(now)

    def _say(self, now: float) -> None:
        self.said_at, self.lines = now, self.lines + 1
        self.log.info("%s%s", self.line(now), f", {self.note}" if self.note else "")

    def line(self, now: float) -> str:
        """`<what>: 40% (2,680 of 6,700 rows), 12 s, about 18 s left`, or without a total the count and rate."""
        elapsed = now - self.started
        if not self.total:
            rate = self.done / elapsed if elapsed > 0 else 0.0
            return f"{self.what}: {self.done:,} {self.unit} in {duration_text(elapsed)} ({rate:,.0f}/s)"
        share = self.done / self.total
        left = f", about {duration_text(elapsed * (1 - share) / share)} left" if 0 < self.done < self.total else ""
        return (f"{self.what}: {100 * share:.0f}% ({self.done:,} of {self.total:,} {self.unit}), "
                f"{duration_text(elapsed)}{left}")

    def close(self) -> None:
        """End the bar; off a terminal, a phase that said how it went says where it ended."""
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        elif self.lines:
            self._say(self.clock())
            self.lines = 0

    def __enter__(self) -> "PhaseProgress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _is_terminal(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
