"""Throughput of an encoder shape on a GPU profile:

    non-embedding training FLOP/s = k · L/(L + b) · H^a · ln(B + 1)^c

L is the depth, H the width, B the microbatch (sequences per forward). The depth factor absorbs the
per-step cost outside the layers (embedding, MLM head, optimizer on the embedding), the batch factor
the poorer use of the device by small batches. Constants are fitted per profile by least squares in log
space from timed training steps, and stored as JSON under <cache_dir>/calculator/<profile>.json.
"""

import dataclasses
import json
import math
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Optional

import numpy as np
from scipy.optimize import least_squares

from cramming.errors import CrammingError
from cramming.files import read_json_object, write_atomically
from cramming.engine.hardware import GpuProfile
from cramming.model import ModelConfig, training_flops_per_token


@dataclass(frozen=True)
class SpeedConstants:
    k: float  # FLOP/s scale
    a: float  # width exponent
    b: float  # depth at which half of the asymptotic per-layer speed is reached
    c: float  # batch exponent


# Fitted on V100 for Transformer-XL in the reference study; the fallback of last resort.
V100_REFERENCE = SpeedConstants(k=2.2e7, a=1.66, b=5.9, c=1.33)
V100_PEAK_TFLOPS = 125.0


@dataclass
class SpeedModel:
    """Constants for one profile, and where they came from (said in every report)."""

    profile: str
    constants: SpeedConstants
    source: str  # e.g. "measured on ...", "scaled from cpu by peak FLOP/s"
    fit_error: Optional[float] = None  # RMS relative error of the fit, when measured

    def flops_per_second(self, depth, width, batch):
        """Non-embedding training FLOP/s; arrays broadcast."""
        return speed_formula(self.constants, depth, width, batch)

    def tokens_per_second(self, arch: ModelConfig, batch: int, vocab_size: int, seq_length: int,
                          mlm_rate: float) -> float:
        flops = non_embedding_flops_per_token(arch, vocab_size, seq_length, mlm_rate)
        return float(self.flops_per_second(arch.num_layers, arch.hidden_size, batch)) / flops


def speed_formula(constants: SpeedConstants, depth, width, batch):
    depth, width, batch = (np.asarray(x, dtype=float) for x in (depth, width, batch))
    k, a, b, c = constants.k, constants.a, constants.b, constants.c
    return k * depth / (depth + b) * width**a * np.log(batch + 1) ** c


def non_embedding_flops_per_token(arch: ModelConfig, vocab_size: int, seq_length: int,
                                  mlm_rate: float) -> float:
    """Training FLOPs per token of the layers alone: the model's count less its MLM head (tied to the
    embedding)."""
    head_only = replace(arch, num_layers=0)
    return (training_flops_per_token(arch, vocab_size, seq_length, mlm_rate)
            - training_flops_per_token(head_only, vocab_size, seq_length, mlm_rate))


def non_embedding_parameters(arch: ModelConfig) -> int:
    """Linear weights of the encoder layers (no embedding, no norms, no biases): the N of scaling laws."""
    H = arch.hidden_size
    ffn_width = arch.intermediate_size // 2 if arch.ffn == "glu" else arch.intermediate_size
    return arch.num_layers * (4 * H * H + H * arch.intermediate_size + ffn_width * H)


def fit_constants(depth, width, batch, flops_per_second) -> tuple[SpeedConstants, float]:
    """Least squares of log FLOP/s; returns the constants and the RMS relative error exp(rms log) - 1."""
    depth, width, batch, measured = (np.asarray(x, dtype=float)
                                     for x in (depth, width, batch, flops_per_second))
    if measured.size < 4:
        raise CrammingError(f"the speed fit needs at least 4 timed shapes, got {measured.size}")
    log_batch = np.log(np.log(batch + 1))

    def residuals(p):  # p = (ln k, a, ln b, c)
        predicted = (p[0] + np.log(depth) - np.log(depth + math.exp(p[2])) + p[1] * np.log(width)
                     + p[3] * log_batch)
        return predicted - np.log(measured)

    start = V100_REFERENCE
    p0 = [math.log(start.k), start.a, math.log(start.b), start.c]
    p0[0] -= np.mean(residuals(p0))  # start at the right scale
    bounds = ([-np.inf, 0, math.log(1e-3), 0], [np.inf, 4, math.log(1e3), 4])
    fit = least_squares(residuals, p0, bounds=bounds)
    constants = SpeedConstants(k=math.exp(fit.x[0]), a=fit.x[1], b=math.exp(fit.x[2]), c=fit.x[3])
    rms = float(np.sqrt(np.mean(fit.fun**2)))
    return constants, math.exp(rms) - 1


def constants_path(cache_dir: str, profile: str) -> Path:
    return Path(cache_dir).expanduser() / "calculator" / f"{profile}.json"


def save_measurement(cache_dir: str, model: SpeedModel, record: dict) -> Path:
    """Store the fitted constants with the timings they came from."""
    path = constants_path(cache_dir, model.profile)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"profile": model.profile, "constants": asdict(model.constants), "source": model.source,
               "fit_error": model.fit_error, **record}
    write_atomically(path, json.dumps(payload, indent=2) + "\n")
    return path


def load_measurement(cache_dir: str, profile: str) -> Optional[SpeedModel]:
    """The stored fit of `profile` (None where there is none), verified: a damaged file is refused, never used."""
    path = constants_path(cache_dir, profile)
    if not path.is_file():
        return None
    try:
        payload = read_json_object(path)
        constants = payload.get("constants")
        fields = [field.name for field in dataclasses.fields(SpeedConstants)]
        if not (isinstance(constants, dict) and sorted(constants) == sorted(fields)
                and all(type(constants[name]) in (int, float) and math.isfinite(constants[name]) for name in fields)
                and isinstance(payload.get("source"), str)
                and (payload.get("fit_error") is None or type(payload["fit_error"]) in (int, float))):
            raise CrammingError(f"{path}: its constants, source or fit_error are missing or of the wrong type")
    except CrammingError as problem:
        raise CrammingError(f"{problem}; the calculator does not use it: measure again with fit=true on that device "
                            "(it rewrites the file), or delete it") from None
    return SpeedModel(profile, SpeedConstants(**constants), payload["source"], payload["fit_error"])


def resolve_speed_model(profile: GpuProfile, profiles: dict[str, GpuProfile], cache_dir: str) -> SpeedModel:
    """Measured constants for the profile; else another measured profile's, or the V100 reference's,
    scaled by peak FLOP/s (k only: the shape of the curve is assumed to carry over)."""
    measured = load_measurement(cache_dir, profile.name)
    if measured is not None:
        return measured
    if not profile.peak_tflops:
        raise CrammingError(f"gpu={profile.name} has no measurements and no peak FLOP/s to scale by; "
                            f"run the calculator with fit=true on that device first")
    for other in profiles.values():
        model = load_measurement(cache_dir, other.name) if other.peak_tflops else None
        if model is not None:
            ratio = profile.peak_tflops / other.peak_tflops
            return SpeedModel(profile.name, replace(model.constants, k=model.constants.k * ratio),
                              f"not measured: scaled from {other.name}'s measurements by peak FLOP/s "
                              f"({ratio:.3g}x)")
    ratio = profile.peak_tflops / V100_PEAK_TFLOPS
    return SpeedModel(profile.name, replace(V100_REFERENCE, k=V100_REFERENCE.k * ratio),
                      f"not measured: the reference V100 constants (Transformer-XL) scaled by peak FLOP/s "
                      f"({ratio:.3g}x)")
