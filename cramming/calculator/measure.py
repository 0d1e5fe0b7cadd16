"""What fit=true and check=true measure on this machine: timed training steps of candidate shapes."""

import logging
import os
import time
from dataclasses import replace

import numpy as np
import torch

from cramming.hardware import GpuProfile, check_profile
from cramming.model import ModelConfig

from .candidates import shapes
from .config import CalculatorConfig
from .speed_model import (SpeedModel, fit_constants, non_embedding_flops_per_token, save_measurement,
                          speed_formula)
from cramming.bench.timing import time_training

log = logging.getLogger("calculator")
BASE = ModelConfig(name="candidate")  # crammed-bert's layout; depth, width, heads and FFN vary


def local_device(profile: GpuProfile) -> str:
    """fit and check measure this machine, so the profile must describe it."""
    check_profile(profile)  # a CUDA profile without a GPU is a one-line error
    return profile.device


def fit_speed(cfg: CalculatorConfig, profile: GpuProfile) -> SpeedModel:
    """Time the fit grid here, fit the constants, report the error and store them with the profile."""
    device, grid = local_device(profile), cfg.fit_grid
    load = os.getloadavg()[0]
    print(f"fit: timing {len(grid.depths) * len(grid.widths) * len(grid.batches)} shapes on {device} "
          f"(1-min load {load:.2f})", flush=True)
    if device == "cpu" and load >= 1.0:
        log.warning("the machine is busy (load %.2f): CPU timings will be slow and noisy", load)
    rows = []
    for arch in shapes(BASE, grid.depths, grid.widths, cfg.candidates.head_size, cfg.candidates.ffn_ratio):
        flops = non_embedding_flops_per_token(arch, cfg.vocab_size, cfg.seq_length, cfg.mlm_rate)
        for batch in grid.batches:
            timing = time_training(arch, batch, cfg.vocab_size, cfg.seq_length, cfg.mlm_rate, device=device,
                                   precision=profile.precision, warmup_steps=grid.warmup_steps,
                                   min_steps=grid.steps)
            rows.append({"depth": arch.num_layers, "width": arch.hidden_size, "batch": batch,
                         "tokens_per_s": timing.tokens_per_s, "flops_per_s": timing.tokens_per_s * flops})
    constants, error = fit_constants(*(np.array([r[key] for r in rows]) for key in
                                       ("depth", "width", "batch", "flops_per_s")))
    print("| depth | width | batch | measured GFLOP/s | fitted GFLOP/s |\n|---|---|---|---|---|")
    for r in rows:
        r["fitted_flops_per_s"] = float(speed_formula(constants, r["depth"], r["width"], r["batch"]))
        print(f"| {r['depth']} | {r['width']} | {r['batch']} | {r['flops_per_s'] / 1e9:.2f} "
              f"| {r['fitted_flops_per_s'] / 1e9:.2f} |")
    threads = torch.get_num_threads()
    device_name = torch.cuda.get_device_name() if device == "cuda" else f"CPU, {threads} threads"
    source = f"measured on {device_name} ({time.strftime('%Y-%m-%d')})"
    model = SpeedModel(profile.name, constants, source, error)
    path = save_measurement(cfg.cache_dir, model, {"load_average_1min": [load, os.getloadavg()[0]],
                                                   "precision": profile.precision, "points": rows})
    print(f"fit: k={constants.k:.4g} a={constants.a:.3f} b={constants.b:.3f} c={constants.c:.3f}; "
          f"RMS error {100 * error:.1f}%; stored in {path}", flush=True)
    return model


def check(cfg: CalculatorConfig, profile: GpuProfile, best, batch: int) -> dict:
    """Train the recommended shape here for check_seconds and compare its tokens/s with the prediction."""
    device = local_device(profile)
    arch = replace(BASE, num_layers=best.layers, hidden_size=best.hidden, num_heads=best.heads,
                   intermediate_size=best.ffn)
    load = os.getloadavg()[0]
    print(f"check: training {best.layers} x {best.hidden} (batch {batch}) for {cfg.check_seconds:g} s on "
          f"{device} (1-min load {load:.2f})", flush=True)
    timing = time_training(arch, batch, cfg.vocab_size, cfg.seq_length, cfg.mlm_rate, device=device,
                           precision=profile.precision, min_seconds=cfg.check_seconds)
    ratio = best.tokens_per_s / timing.tokens_per_s
    print(f"check: predicted {best.tokens_per_s:,.0f} tokens/s, measured {timing.tokens_per_s:,.0f} tokens/s "
          f"over {timing.steps} steps ({100 * (ratio - 1):+.1f}%); "
          f"1-min load {load:.2f} -> {os.getloadavg()[0]:.2f}")
    return {"predicted_tokens_per_s": best.tokens_per_s, "measured_tokens_per_s": timing.tokens_per_s,
            "steps": timing.steps, "seconds": timing.seconds, "relative_error": ratio - 1,
            "load_average_1min": [load, os.getloadavg()[0]]}
