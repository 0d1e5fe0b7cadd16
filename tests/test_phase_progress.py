"""A long phase's progress (cramming.phase_progress): silent while short, a line at most every EVERY_S seconds in a
log file or pipe, with its share done and the time left, and one where it ended; a bar on a terminal."""

import io
import logging

from cramming.phase_progress import PhaseProgress, duration_text


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_lines_come_every_ten_seconds_with_the_share_done_and_the_time_left(caplog):
    clock = Clock()
    log = logging.getLogger("phase-test")
    with caplog.at_level(logging.INFO, logger="phase-test"):
        with PhaseProgress("validation at 50% of training", 6700, "rows", log, stream=io.StringIO(),
                           clock=clock) as progress:
            for _ in range(67):
                clock.now += 0.5
                progress.advance(100)
    assert caplog.messages == [
        "validation at 50% of training: 30% (2,000 of 6,700 rows), 10 s, about 24 s left",
        "validation at 50% of training: 60% (4,000 of 6,700 rows), 20 s, about 14 s left",
        "validation at 50% of training: 90% (6,000 of 6,700 rows), 30 s, about 3 s left",
        "validation at 50% of training: 100% (6,700 of 6,700 rows), 34 s",  # where it ended
    ]


def test_a_phase_without_a_total_says_its_count_and_rate(caplog):
    clock, log = Clock(), logging.getLogger("phase-test")
    with caplog.at_level(logging.INFO, logger="phase-test"):
        progress = PhaseProgress("tokenizing", None, "documents", log, stream=io.StringIO(), clock=clock)
        clock.now = 12.0
        progress.advance(3000)
    assert caplog.messages == ["tokenizing: 3,000 documents in 12 s (250/s)"]


def test_a_terminal_gets_a_bar_and_no_lines(caplog):
    clock, terminal = Clock(), Terminal()
    with caplog.at_level(logging.INFO, logger="phase-test"):
        with PhaseProgress("BLiMP", 10, "rows", logging.getLogger("phase-test"), stream=terminal,
                           clock=clock) as progress:
            clock.now = 30.0
            progress.advance(10)
    assert caplog.messages == [] and progress.bar is None


def test_durations_read_as_people_say_them():
    assert [duration_text(s) for s in (4.4, 59.6, 185, 3720)] == ["4 s", "60 s", "3m05s", "1h02m"]
