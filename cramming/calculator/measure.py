"""What fit=true and check=true measure on this machine (timed training steps of candidate shapes), and what
check_run compares: the speed model against a real pretraining run's tokens/s."""

import logging
import os
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
from omegaconf import OmegaConf

from cramming.bench.timing import time_training
from cramming.errors import CrammingError
from cramming.files import read_json_object
from cramming.engine.hardware import GpuProfile, card_profile_name, check_profile, known_profiles
from cramming.model import ModelConfig
from cramming.model.config import as_model_config

from .candidates import shapes
from .config import CalculatorConfig
from .speed_model import (SpeedModel, fit_constants, non_embedding_flops_per_token, save_measurement,
                          speed_formula)

log = logging.getLogger("calculator")
BASE = ModelConfig(name="candidate")  # crammed-bert's layout; depth, width, heads and FFN vary


def local_device(profile: GpuProfile) -> str:
    """fit and check measure this machine, so the profile must describe it: a CUDA profile must be this
    card's (an H100's timings stored as gpu=2080ti, the default, would mislead every later ranking)."""
    check_profile(profile)  # a CUDA profile without a GPU is a one-line error
    if profile.device == "cuda":
        card = torch.cuda.get_device_name()
        own = card_profile_name(card, known_profiles())
        if own != profile.name:
            raise CrammingError(f"fit and check time this machine's {card}, which is gpu={own}, not "
                                f"gpu={profile.name}: add gpu=auto")
    return profile.device


def fit_speed(cfg: CalculatorConfig, profile: GpuProfile) -> SpeedModel:
    """Time the fit grid here, fit the constants, report the error and store them with the profile."""
    device, grid = local_device(profile), cfg.fit_grid.resolved(profile)
    load = os.getloadavg()[0]
    print(f"fit: timing {len(grid.depths) * len(grid.widths) * len(grid.batches)} shapes on {device}"
          f"{', compiled' if grid.compile else ''} (1-min load {load:.2f})", flush=True)
    if device == "cpu" and load >= 1.0:
        log.warning("the machine is busy (load %.2f): CPU timings will be slow and noisy", load)
    rows = []
    for arch in shapes(BASE, grid.depths, grid.widths, cfg.candidates.head_size, cfg.candidates.ffn_ratio):
        flops = non_embedding_flops_per_token(arch, cfg.vocab_size, cfg.seq_length, cfg.mlm_rate)
        for batch in grid.batches:
            timing = time_training(arch, batch, cfg.vocab_size, cfg.seq_length, cfg.mlm_rate, device=device,
                                   precision=profile.precision, compile=grid.compile,
                                   warmup_steps=grid.warmup_steps, min_steps=grid.steps)
            rows.append({"depth": arch.num_layers, "width": arch.hidden_size, "batch": batch,
                         "tokens_per_s": timing.tokens_per_s, "flops_per_s": timing.tokens_per_s * flops})
            print(f"fit: {arch.num_layers} x {arch.hidden_size}, batch {batch}: {timing.tokens_per_s:,.0f} tokens/s",
                  flush=True)
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
                                                   "precision": profile.precision, "compile": grid.compile,
                                                   "points": rows})
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
                           precision=profile.precision, compile=cfg.fit_grid.resolved(profile).compile,
                           min_seconds=cfg.check_seconds)
    ratio = best.tokens_per_s / timing.tokens_per_s
    print(f"check: predicted {best.tokens_per_s:,.0f} tokens/s, measured {timing.tokens_per_s:,.0f} tokens/s "
          f"over {timing.steps} steps ({100 * (ratio - 1):+.1f}%); "
          f"1-min load {load:.2f} -> {os.getloadavg()[0]:.2f}")
    return {"predicted_tokens_per_s": best.tokens_per_s, "measured_tokens_per_s": timing.tokens_per_s,
            "steps": timing.steps, "seconds": timing.seconds, "relative_error": ratio - 1,
            "load_average_1min": [load, os.getloadavg()[0]]}


def read_run_speed(run_dir: str, profile: GpuProfile) -> dict:
    """What check_run compares with: a finished pretraining run's shape, microbatch and the tokens/s it measured
    at steady state (summary.json's steady_tokens_per_s: the real loop after its first record). Read before
    anything is timed, so that a wrong run fails at once."""
    directory = Path(run_dir)
    if not (directory / "summary.json").is_file() or not (directory / "config.yaml").is_file():
        raise CrammingError(f"check_run={run_dir} needs summary.json and config.yaml: name a finished pretraining "
                            "run's directory (<output_dir>/<name>/<timestamp>)")
    summary, config = read_json_object(directory / "summary.json"), OmegaConf.load(directory / "config.yaml")
    device = summary["provenance"]["device"]
    ran_on = "cpu" if device["type"] == "cpu" else card_profile_name(device["name"], known_profiles())
    if ran_on != profile.name:
        raise CrammingError(f"check_run={run_dir} ran on {device['name']} (gpu={ran_on}), not gpu={profile.name}")
    if not summary.get("steady_tokens_per_s"):
        raise CrammingError(f"check_run={run_dir} has no steady tokens/s (fewer than two records): a longer run")
    return {"run": str(directory), "arch": as_model_config(config.arch), "microbatch": summary["microbatch_size"],
            "vocab_size": int(config.data.tokenizer.vocab_size), "seq_length": int(config.data.seq_length),
            "mlm_rate": float(config.train.mlm_rate), "measured_tokens_per_s": summary["steady_tokens_per_s"]}


def check_run(run: dict, speed: SpeedModel) -> dict:
    """The speed model's tokens/s for the run's shape and microbatch against what the run measured."""
    arch, measured = run["arch"], run["measured_tokens_per_s"]
    predicted = speed.tokens_per_second(arch, run["microbatch"], run["vocab_size"], run["seq_length"], run["mlm_rate"])
    print(f"check_run: {arch.num_layers} x {arch.hidden_size}, microbatch {run['microbatch']}: predicted "
          f"{predicted:,.0f} tokens/s, the run measured {measured:,.0f} ({100 * (predicted / measured - 1):+.1f}%)")
    return {"run": run["run"], "microbatch": run["microbatch"], "predicted_tokens_per_s": predicted,
            "measured_tokens_per_s": measured, "relative_error": predicted / measured - 1}
