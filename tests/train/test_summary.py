"""The summary's derived figures: the smoothed loss and the compile-time estimate."""

import pytest

from cramming.train.summary import compile_seconds, smoothed_loss


def test_smoothed_loss_is_the_mean_over_the_last_tenth_of_the_steps():
    records = [{"step": step, "loss": float(step)} for step in range(1, 21)]
    assert smoothed_loss(records) == pytest.approx(19.5)  # steps 19 and 20
    assert smoothed_loss(records[:1]) == 1.0 and smoothed_loss([]) is None


def test_compile_time_is_the_first_steps_excess_over_later_microbatches():
    # first step: 1 microbatch in 5 s; later: 0.5 s per microbatch
    assert compile_seconds([(5.0, 1), (0.5, 1), (1.0, 2), (0.6, 1)]) == pytest.approx(4.5)
    assert compile_seconds([(0.4, 1), (0.5, 1)]) == 0.0  # never negative
    assert compile_seconds([(5.0, 1)]) is None  # nothing to compare with


def test_time_shares_leave_out_the_first_step():
    from cramming.train.summary import time_shares

    # 15 s of training in this process: the first step's 5 s, then 10 s of which 8 in steps 2 and 3
    timing = {"steps": 3, "step_s": 8.0, "data_s": 1.0, "first_step_s": 5.0, "window_s": 10.0}
    assert time_shares(timing) == {"step": 0.7, "data": 0.1, "around": 0.2, "seconds": 10.0}
    assert time_shares({**timing, "steps": 1, "window_s": 0.0}) is None  # nothing after the first step


def test_the_steady_rate_leaves_out_the_first_records_compilation():
    from cramming.train.summary import steady_tokens_per_s

    # the first record's interval held 40 s of compilation; after it, 1,000 tokens per clock second
    records = [{"elapsed": 42.0, "tokens": 2_000}, {"elapsed": 44.0, "tokens": 4_000},
               {"elapsed": 50.0, "tokens": 10_000}]
    assert steady_tokens_per_s(records) == pytest.approx(1_000.0)
    assert records[-1]["tokens"] / records[-1]["elapsed"] == pytest.approx(200.0)  # the mean, compilation included
    assert steady_tokens_per_s(records[:1]) is None
