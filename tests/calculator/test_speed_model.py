"""The speed formula, its fit on synthetic timings with known constants, storage and the fallbacks."""

import math

import numpy as np
import pytest

from cramming.calculator.speed_model import (V100_REFERENCE, SpeedConstants, SpeedModel, fit_constants,
                                             load_measurement, resolve_speed_model, save_measurement,
                                             speed_formula)
from cramming.errors import CrammingError
from cramming.engine.hardware import known_profiles

TRUE = SpeedConstants(k=3.0e6, a=1.4, b=2.5, c=0.9)


def grid():
    depth, width, batch = np.meshgrid([1, 2, 4, 8], [64, 128, 256], [4, 16, 64], indexing="ij")
    return depth.ravel(), width.ravel(), batch.ravel()


def test_formula_matches_hand_computation():
    value = speed_formula(V100_REFERENCE, 16, 768, 128)
    expected = 2.2e7 * 16 / (16 + 5.9) * 768**1.66 * math.log(129) ** 1.33
    assert float(value) == pytest.approx(expected, rel=1e-12)
    assert 1e12 < expected < 125e12  # a few TFLOP/s on a V100: the reference constants are in FLOP/s


def test_fit_recovers_known_constants_exactly():
    depth, width, batch = grid()
    constants, error = fit_constants(depth, width, batch, speed_formula(TRUE, depth, width, batch))
    assert constants.k == pytest.approx(TRUE.k, rel=1e-3)
    assert (constants.a, constants.b, constants.c) == pytest.approx((TRUE.a, TRUE.b, TRUE.c), rel=1e-4)
    assert error < 1e-6


def test_fit_with_noise_reports_its_error():
    depth, width, batch = grid()
    noise = np.exp(np.random.default_rng(0).normal(0, 0.05, depth.size))  # ~5% multiplicative noise
    constants, error = fit_constants(depth, width, batch, speed_formula(TRUE, depth, width, batch) * noise)
    assert constants.a == pytest.approx(TRUE.a, abs=0.05)
    assert constants.c == pytest.approx(TRUE.c, abs=0.1)
    assert 0.02 < error < 0.08


def test_fit_needs_enough_shapes():
    with pytest.raises(CrammingError, match="at least 4"):
        fit_constants([1, 2], [64, 64], [4, 4], [1e9, 2e9])


def test_measurement_round_trips(tmp_path):
    model = SpeedModel("cpu", TRUE, "measured on a test", 0.03)
    save_measurement(str(tmp_path), model, {"points": []})
    assert load_measurement(str(tmp_path), "cpu") == model
    assert load_measurement(str(tmp_path), "a100") is None


def test_fallbacks_scale_by_peak(tmp_path):
    profiles = known_profiles()
    reference = resolve_speed_model(profiles["2080ti"], profiles, str(tmp_path))
    assert reference.constants.k == pytest.approx(V100_REFERENCE.k * 53.8 / 125.0)
    assert "V100" in reference.source and reference.fit_error is None

    save_measurement(str(tmp_path), SpeedModel("a100", TRUE, "measured", 0.02), {})
    scaled = resolve_speed_model(profiles["2080ti"], profiles, str(tmp_path))
    assert scaled.constants == SpeedConstants(k=TRUE.k * 53.8 / 312.0, a=TRUE.a, b=TRUE.b, c=TRUE.c)
    assert "scaled from a100" in scaled.source
    assert resolve_speed_model(profiles["a100"], profiles, str(tmp_path)).constants == TRUE


def test_unmeasured_profile_without_peak_is_an_error(tmp_path):
    profiles = known_profiles()
    with pytest.raises(CrammingError, match="fit=true"):
        resolve_speed_model(profiles["cpu"], profiles, str(tmp_path))
