"""summary.json: the record a run leaves behind, however it ended, and the leaving of it (leave_record: the
summary, the plots, W&B's summary).

Written at the end of every run — finished, stopped at max_steps, stopped by non-finite losses or
interrupted — so an ablation table can be built from summary files alone. Losses come from
metrics.jsonl, so the summary and the curve always agree.
"""

import dataclasses
import json
import logging
import resource
import statistics
from dataclasses import dataclass
from pathlib import Path

import torch

from cramming.engine.hardware import model_flops_utilization
from cramming.files import write_atomically
from cramming.phase_progress import duration_text
from cramming.threads import BUSY_FROM, measured_share
from cramming.train.plots import plot_run
from cramming.train.reporting import MetricsLogger, WandbLogger
from cramming.train.runs import read_records

log = logging.getLogger("pretrain")
SMOOTHING_FRACTION = 0.1  # smoothed loss: mean of the records in the last 10% of the steps


def smoothed_loss(records: list[dict]) -> float | None:
    """Mean logged loss over the last SMOOTHING_FRACTION of the steps (at least the last record)."""
    if not records:
        return None
    last_step = records[-1]["step"]
    tail = [r["loss"] for r in records if r["step"] > (1 - SMOOTHING_FRACTION) * last_step] or [records[-1]["loss"]]
    return sum(tail) / len(tail)


ZERO_SHOT_KEYS = ("blimp", "bits_per_char")  # the zero-shot probe's figures (cramming.eval.probe), where measured


def validation_summary(records: list[dict], held_out_rows: int, seconds: float, wall_budget: float) -> dict | None:
    """The validation curve of the records: each point, the first and the last (None without validation)."""
    points = [{"step": r["step"], "budget_fraction": round(min(r["elapsed"] / wall_budget, 1.0), 4),
               "loss": r["val_loss"], "accuracy": r["val_accuracy"],
               **{key: r[key] for key in ZERO_SHOT_KEYS if key in r}} for r in records if "val_loss" in r]
    if not held_out_rows:
        return None
    return {
        "held_out_rows": held_out_rows,
        "curve": points,
        "first_loss": points[0]["loss"] if points else None,
        "final_loss": points[-1]["loss"] if points else None,
        "final_accuracy": points[-1]["accuracy"] if points else None,
        **({f"final_{key}": points[-1][key] for key in ZERO_SHOT_KEYS if key in points[-1]} if points else {}),
        "seconds": round(seconds, 3),  # this process, off the budget clock
    }


def time_shares(timing: dict) -> dict | None:
    """Where this process's training time went after its first step: inside the step (forward, backward,
    optimizer), waiting for data, and around the step (logging, telemetry, checkpoints, callbacks, the
    clock). Host time: on a GPU, work the host does not wait for shows up where it next waits."""
    window = timing["window_s"]
    if timing["steps"] < 2 or window <= 0:
        return None
    compute = timing["step_s"] - timing["data_s"]
    return {"step": round(compute / window, 4), "data": round(timing["data_s"] / window, 4),
            "around": round(1 - timing["step_s"] / window, 4), "seconds": round(window, 3)}


def compile_seconds(first_steps: list[tuple[float, int]]) -> float | None:
    """How much longer the first step took than its microbatches take later: compilation and warm-up.

    `first_steps` holds (seconds, microbatches) of the first optimizer steps of this process.
    """
    if len(first_steps) < 2:
        return None
    per_microbatch = statistics.median(seconds / microbatches for seconds, microbatches in first_steps[1:])
    seconds, microbatches = first_steps[0]
    return max(seconds - microbatches * per_microbatch, 0.0)


def steady_tokens_per_s(records: list[dict]) -> float | None:
    """Tokens per second of training after the first record, on the budget clock: without the first
    interval's compilation and warm-up (and, like the clock, without validation). None with fewer than two
    records."""
    if len(records) < 2 or records[-1]["elapsed"] <= records[0]["elapsed"]:
        return None
    return (records[-1]["tokens"] - records[0]["tokens"]) / (records[-1]["elapsed"] - records[0]["elapsed"])


def peak_memory_gb(device: torch.device) -> float:
    """Peak memory of training: allocated on the GPU (since the last reset), resident set on the CPU."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**30
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 2**30  # Linux reports KiB


@dataclass
class RunFacts:
    """What summary.json is built from: the run's records and progress, its budget and timing, its set-up."""

    records: list[dict]
    stop_reason: str  # budget | max_steps | early_stop | non-finite | interrupted | error
    progress: dict  # Progress as a dict
    budget_hours: float
    wall_budget: float
    session_training_s: float  # this process, on the budget clock
    session_wall_s: float  # this process, wall
    first_steps: list[tuple[float, int]]  # (seconds, microbatches) of the first steps: the compile estimate
    peak_memory: float  # GiB
    energy_wh: float | None
    flops_per_token: float
    peak_tflops: float | None
    microbatch: dict  # {"size", "source"}
    provenance: dict
    held_out_rows: int = 0
    validation_s: float = 0.0
    stop_detail: str | None = None
    step_timing: dict | None = None
    # wall seconds outside the clock, by part: setup_s (data_s and microbatch_search_s within it) and
    # after_training_s (from the loop's end to the record); validation_s and the loop's own are the others
    outside_parts: dict | None = None


def outside_training(facts: RunFacts) -> dict | None:
    """Where the wall seconds outside the budget clock went, this process: the set-up before the loop (of
    which preparing or opening the data, and the microbatch search), the validations (the clock paused), the
    loop's start and end off the clock (callbacks' on_train_start and on_train_end: the final checkpoint, the
    last records and plots; with a simulated clock, also its difference from the wall, either sign), and the
    time from the loop's end to this record."""
    if facts.outside_parts is None:
        return None
    parts = facts.outside_parts
    named = {
        "setup_s": parts["setup_s"],
        "data_s": parts["data_s"],
        "microbatch_search_s": parts["microbatch_search_s"],
        "validation_s": facts.validation_s,
        "after_training_s": parts["after_training_s"],
    }
    total = facts.session_wall_s - facts.session_training_s
    start_and_end = total - named["setup_s"] - named["validation_s"] - named["after_training_s"]
    return {key: round(value, 3) for key, value in {**named, "loop_start_and_end_s": start_and_end}.items()}


def build_summary(facts: RunFacts) -> dict:
    records, progress, wall_budget = facts.records, facts.progress, facts.wall_budget
    flops_per_token, peak_tflops, step_timing = facts.flops_per_token, facts.peak_tflops, facts.step_timing
    elapsed = progress["elapsed"]
    tokens_per_s = progress["tokens"] / elapsed if elapsed > 0 else None
    mfu = model_flops_utilization(tokens_per_s, flops_per_token, peak_tflops) if tokens_per_s else None
    compiled = compile_seconds(facts.first_steps)
    steady = steady_tokens_per_s(records)
    steady_mfu = model_flops_utilization(steady, flops_per_token, peak_tflops) if steady else None
    return {
        "stop_reason": facts.stop_reason,  # budget | max_steps | early_stop | non-finite | interrupted | error
        "stop_detail": facts.stop_detail,  # why, for early_stop
        "tokens": progress["tokens"],
        "steps": progress["step"],
        "microbatches": progress["microbatches"],
        "microbatch_size": facts.microbatch["size"],
        "microbatch_source": facts.microbatch["source"],
        "final_loss": records[-1]["loss"] if records else None,
        "smoothed_loss": smoothed_loss(records),
        "validation": validation_summary(records, facts.held_out_rows, facts.validation_s, wall_budget),
        "mean_tokens_per_s": round(tokens_per_s, 1) if tokens_per_s else None,
        "mean_mfu": round(mfu, 4) if mfu is not None else None,
        "steady_tokens_per_s": round(steady, 1) if steady else None,  # after the first record: no compile
        "steady_mfu": round(steady_mfu, 4) if steady_mfu is not None else None,
        "nonfinite_skipped": progress["nonfinite_total"],
        "training_s": round(elapsed, 3),  # on the budget clock, earlier runs of a resumed training included
        "compile_s": round(compiled, 3) if compiled is not None else None,  # estimate, this process only
        "time_shares": time_shares(step_timing) if step_timing else None,
        # this process: data, search, setup
        "outside_training_s": round(facts.session_wall_s - facts.session_training_s, 3),
        "outside_training": outside_training(facts),
        "lost_to_crashes_s": round(progress["lost_to_crashes"], 3),  # charged on resumes (heartbeat.json)
        "peak_memory_gb": round(facts.peak_memory, 3),
        "energy_wh": round(facts.energy_wh, 3) if facts.energy_wh is not None else None,  # NVML, this process only
        "budget_gpu_hours": facts.budget_hours,
        "budget_wall_s": round(wall_budget, 3),
        "budget_used_fraction": round(min(elapsed / wall_budget, 1.0), 4),
        "provenance": facts.provenance,  # code, packages, device, config hash, dataset (cramming.provenance)
        # on the CPU: the threads, the cores other processes kept busy at the start, the speed share to expect
        "machine": dataclasses.asdict(share) if (share := measured_share()) is not None else None,
    }


def write_summary(path: Path, summary: dict) -> None:
    write_atomically(path, json.dumps(summary, indent=2, allow_nan=False) + "\n")  # strict JSON: no bare NaN


def leave_record(facts: RunFacts, run_dir: Path, logger: MetricsLogger, wandb: WandbLogger, plots: bool) -> dict:
    """Stop the telemetry, then write summary.json (facts with the records and the energy) and the plots (unless
    `plots` is false: logging.plots) and hand the summary to W&B."""
    energy = logger.sampler.energy_wh()
    logger.sampler.stop()
    summary = build_summary(dataclasses.replace(facts, records=read_records(run_dir / "metrics.jsonl"),
                                                energy_wh=energy))
    write_summary(run_dir / "summary.json", summary)
    if plots:
        plot_run(run_dir)
    wandb.summary(summary, prefix="summary/")
    log.info("summary: %s%s", run_dir / "summary.json", f"; plots: {run_dir / 'plots'}" if plots else "")
    if (where := time_line(summary, facts.session_training_s)) is not None:
        log.info("%s", where)
    return summary


def time_line(summary: dict, session_training_s: float) -> str | None:
    """Where this process's wall time went: training on the budget clock, and outside it the set-up (the data
    within it), the validations and the rest (the loop's start and end, the record); and a busy machine's share."""
    outside = summary["outside_training"]
    if outside is None:
        return None
    rest = outside["loop_start_and_end_s"] + outside["after_training_s"]
    total = session_training_s + summary["outside_training_s"]
    parts = [f"training {duration_text(session_training_s)} (the budget clock)",
             f"validation {duration_text(outside['validation_s'])}",
             f"set-up {duration_text(outside['setup_s'])} (data {duration_text(outside['data_s'])})",
             f"start, end and record {duration_text(rest)}"]
    machine = summary.get("machine") or {}
    busy = (f"; the machine was busy at the start ({machine['busy_cores']:.1f} of {machine['cores']} cores in use "
            f"by other processes: about {100 * machine['expected_speed_share']:.0f}% of an idle machine's speed)"
            if machine.get("busy_cores") is not None and machine["busy_cores"] >= BUSY_FROM else "")
    return f"time: {duration_text(total)} in all: " + ", ".join(parts) + busy
