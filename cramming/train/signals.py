"""The signals that ask a run to stop: the first Ctrl-C or SIGTERM stops after the current step, with a checkpoint
and one line saying how to resume; a second exits at once."""

import os
import signal
import sys
import threading

from cramming.errors import CrammingError

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(CrammingError):
    """The run stopped on a signal after writing a checkpoint; the exit code says which (130, 143)."""

    label = "interrupted"

    def __init__(self, message: str, signum: int):
        super().__init__(message)
        self.exit_code = 128 + signum


class GracefulStop:
    """A context in which the first SIGINT/SIGTERM only sets `signum`; the loop stops at its next check."""

    def __init__(self):
        self.signum: int | None = None
        self.previous = {}

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def __enter__(self) -> "GracefulStop":
        if threading.current_thread() is threading.main_thread():  # signals are only delivered there
            self.previous = {signum: signal.signal(signum, self._handle) for signum in SIGNALS}
        return self

    def __exit__(self, *exc) -> None:
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)

    def _handle(self, signum: int, frame) -> None:
        name = signal.Signals(signum).name
        if self.signum is not None:
            print(f"interrupted: second {name}: exiting now, without a checkpoint", file=sys.stderr, flush=True)
            os._exit(128 + signum)
        self.signum = signum
        print(f"{name}: stopping after this step and writing a checkpoint ({name} again exits at once)",
              file=sys.stderr, flush=True)
