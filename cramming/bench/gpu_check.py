"""The first-GPU check (`scripts/gpu_check.py`): what to check and measure first on a GPU machine, in
stages, each written as JSON and a markdown section for docs/benchmarks.md as it ends and gathered into
one <output_dir>/report.md (cramming.bench.gpu_report).

- tests: the GPU test suite (tests/gpu: every command and GPU-only option on the GPU), from a checkout;
- bench: the full-size step, ours vs transformers' BertForMaskedLM, compiled and eager (scripts/benchmark.py),
  and the SDPA kernel attention runs;
- cram: a few minutes of real pretraining on the corpus shards at hand, validation curve and telemetry on;
- glue: RTE, MRPC and STS-B on the cram stage's checkpoint, with the time per task.

stage=all runs the four in turn in this process. stage=quick runs a short version of each (the tests marked
quick, the eager bench, a 2-minute cram, RTE), each in its own process under a time limit, so that the whole
check fits a short GPU slot (cramming.bench.gpu_quick). A failed stage is reported and the next one still
runs; the command then ends in one error line naming the failed stages.

`device=cpu` runs the same stages with a tiny model as a dry run (how the test suite checks the wiring);
the measurements are only meaningful on the GPU.
"""

import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import torch

from cramming import compose_config, quoted_override
from cramming.bench.benchmark import run_benchmark
from cramming.bench.gpu_quick import run_quick
from cramming.bench.gpu_report import STAGES, record_stage
from cramming.bench.gpu_suite import SELECTIONS, run_gpu_suite
from cramming.bench.inspect import sdpa_kernel_used
from cramming.errors import CrammingError
from cramming.pretraining import PretrainConfig, pretrain  # noqa: F401  (PretrainConfig registers the schemas)
from cramming.train.runs import new_run_dir, resolve_checkpoint
from cramming.train.signals import Interrupted

log = logging.getLogger(__name__)
BENCH_MODES = ("compiled", "eager")
DEFAULT_ROOT = Path("outputs", "gpu_check")  # each check without output_dir= in a new <timestamp> folder here


@dataclass
class QuickLimits:
    """Seconds stage=quick gives each part, its process's start and end included. A part still running at
    its limit is stopped and reported as failed, so their sum (8 min 20 s) bounds the whole check."""

    tests: float = 100.0
    bench: float = 90.0
    cram: float = 190.0
    # on an H100 (2026-11-27) the start, the checkpoint load and RTE's first 3 epochs took 60 s (the epochs 14.9,
    # 13.0 and 9.5 s): the protocol's 5 epochs need about 80 s
    glue: float = 120.0


@dataclass
class GpuCheckConfig:
    stage: str = "all"  # tests | bench | cram | glue | all (each in turn) | quick (short parts, each time-limited)
    device: str = "cuda"  # cuda | cpu (a dry run with a tiny model: checks the wiring, measures nothing)
    output_dir: Optional[str] = None  # null: a new outputs/gpu_check/<timestamp> each check
    data_files: Optional[str] = None  # corpus shards for the cram stage (a glob); null: the embedded corpus
    glue_dir: Optional[str] = None  # classic GLUE TSV layout for the glue stage; null: the hub
    cram_minutes: Optional[float] = None  # training time of the cram stage (budget clock); null: 5, 2 in quick
    bench_batch_size: int = 128  # sequences per step of the bench stage (full size, bf16)
    bench_modes: list[str] = field(default_factory=lambda: list(BENCH_MODES))  # quick: eager
    tests: str = "all"  # the tests stage's selection of tests/gpu: all | quick (those marked quick)
    glue_tasks: list[str] = field(default_factory=lambda: ["rte", "mrpc", "stsb"])  # quick: rte
    quick_limits: QuickLimits = field(default_factory=QuickLimits)


def check_config(cfg: GpuCheckConfig) -> None:
    if cfg.stage not in (*STAGES, "all", "quick"):
        raise CrammingError(f"stage={cfg.stage!r} must be one of {', '.join(STAGES)}, all, quick")
    if cfg.device not in ("cuda", "cpu"):
        raise CrammingError(f"device={cfg.device!r} must be cuda or cpu (a dry run)")
    if cfg.tests not in SELECTIONS:
        raise CrammingError(f"tests={cfg.tests!r} must be one of {', '.join(SELECTIONS)}")
    if not cfg.bench_modes or not set(cfg.bench_modes) <= set(BENCH_MODES):
        raise CrammingError(f"bench_modes={list(cfg.bench_modes)} must name some of {', '.join(BENCH_MODES)}")
    if not cfg.glue_tasks:
        raise CrammingError("glue_tasks=[] must name at least one task")
    if cfg.cram_minutes is not None and not cfg.cram_minutes > 0:
        raise CrammingError(f"cram_minutes={cfg.cram_minutes} must be positive")
    for part in STAGES:
        if not (seconds := getattr(cfg.quick_limits, part)) > 0:
            raise CrammingError(f"quick_limits.{part}={seconds} must be positive (seconds)")
    if cfg.device == "cuda" and not torch.cuda.is_available():
        raise CrammingError("gpu_check needs a CUDA GPU (torch.cuda.is_available() is False here); "
                            "device=cpu runs the stages as a dry run with a tiny model")


def run_gpu_check(cfg: GpuCheckConfig) -> dict:
    """Run the stage(s); each leaves <output_dir>/<stage>.json and .md, and report.md holds every stage's
    section so far. Returns {stage: result}; a failed stage is an error once all have run."""
    check_config(cfg)
    out = Path(cfg.output_dir) if cfg.output_dir else new_run_dir(DEFAULT_ROOT.parent, DEFAULT_ROOT.name)
    out.mkdir(parents=True, exist_ok=True)
    log.info("gpu_check: writing to %s", out)
    if cfg.stage == "quick":
        results = run_quick(cfg, out, device_label(cfg))
    else:
        results = {stage: run_stage(stage, cfg, out) for stage in (STAGES if cfg.stage == "all" else (cfg.stage,))}
    failed = [f"{stage} ({result['error']})" for stage, result in results.items() if "error" in result]
    if failed:
        raise CrammingError(f"gpu_check: {len(failed)} stage(s) failed: {'; '.join(failed)}; see {out / 'report.md'}")
    return results


def device_label(cfg: GpuCheckConfig) -> str:
    return torch.cuda.get_device_name() if cfg.device == "cuda" else "cpu (dry run)"


def run_stage(stage: str, cfg: GpuCheckConfig, out: Path) -> dict:
    """One stage in this process: its result, or the error that stopped it (logged with its traceback),
    recorded. A stopped cram (Ctrl-C, SIGTERM: stage=quick's limit) is recorded, then stops the check."""
    for earlier in (out / f"{stage}.json", out / f"{stage}.md"):  # an earlier check's: not this one's result
        earlier.unlink(missing_ok=True)
    log.info("gpu_check: stage %s", stage)
    started, stopped = time.perf_counter(), None
    try:
        result = {"tests": _tests, "bench": _bench, "cram": _cram, "glue": _glue}[stage](cfg, out)
    except Exception as error:  # reported as this stage's failure; the next stage still runs
        log.error("gpu_check: stage %s failed", stage, exc_info=not isinstance(error, CrammingError))
        result = {"error": str(error) if isinstance(error, CrammingError) else f"{type(error).__name__}: {error}"}
        stopped = error if isinstance(error, Interrupted) else None
    recorded = record_stage(out, stage, result, time.perf_counter() - started, device_label(cfg))
    if stopped is not None:
        raise stopped
    return recorded


def _tests(cfg: GpuCheckConfig, out: Path) -> dict:

    result = {"selection": cfg.tests, **run_gpu_suite(out / "tests.jsonl", cfg.tests)}
    if result.get("failed") and "error" not in result:
        result["error"] = f"{len(result['failed'])} GPU test(s) failed ({', '.join(result['failed'])})"
    return result


def _bench(cfg: GpuCheckConfig, out: Path) -> dict:

    if cfg.device == "cuda":
        common = ["arch=crammed-bert", "benchmark.dtype=bf16", f"benchmark.batch_size={cfg.bench_batch_size}"]
    else:
        common = ["arch=crammed-bert-tiny", "benchmark.batch_size=4", "benchmark.steps=1", "benchmark.warmup_steps=1",
                  "benchmark.vocab_size=512"]
    common += [f"benchmark.device={cfg.device}", quoted_override("benchmark.output_dir", out / "bench")]
    results = {}
    for mode in [mode for mode in BENCH_MODES if mode in cfg.bench_modes]:
        if mode == "compiled" and cfg.device == "cpu":
            log.info("gpu_check: the dry run does not compile (inductor takes minutes on a CPU)")
            continue
        overrides = common + [f"benchmark.compile={mode == 'compiled'}"]
        results[mode] = json.loads(run_benchmark(compose_config("benchmark", overrides)).read_text())
    if results:  # the attention of the model just timed: (B, nh, T, hs) in its dtype, on its device
        timed = next(iter(results.values()))
        arch, settings = timed["arch"], timed["settings"]
        results["sdpa_kernel"] = sdpa_kernel_used(settings["batch_size"], arch["num_heads"], settings["seq_length"],
                                                  arch["hidden_size"] // arch["num_heads"], settings["dtype"],
                                                  torch.device(cfg.device))
    return results


def cram_overrides(cfg: GpuCheckConfig, out: Path) -> list[str]:
    """The cram stage's pretraining command line."""
    data = ["data=embedded"] if cfg.data_files is None else \
        ["data=local", quoted_override("data.files", cfg.data_files)]
    # device=cpu is a dry run of the stages' plumbing: the zero-shot probe, seconds on a GPU, would dominate it
    arch = ["arch=crammed-bert", "gpu=auto"] if cfg.device == "cuda" else \
        ["arch=crammed-bert-tiny", "gpu=cpu", "train.validation.zero_shot=false"]
    minutes = cfg.cram_minutes if cfg.cram_minutes is not None else 5.0
    return [*data, *arch, f"budget={minutes / 60}", "name=cram", quoted_override("output_dir", out),
            quoted_override("cache_dir", out / "cache"), "logging.progress=lines"]


def _cram(cfg: GpuCheckConfig, out: Path) -> dict:

    overrides = cram_overrides(cfg, out)
    run_dir = pretrain(compose_config("pretrain", overrides))
    summary = json.loads((run_dir / "summary.json").read_text())
    return {"run_dir": str(run_dir), "overrides": overrides, "summary": summary}


def _glue(cfg: GpuCheckConfig, out: Path) -> dict:
    from cramming.eval.run import run_glue  # noqa: PLC0415 -- transformers: only when the GLUE stage runs

    cram = out / "cram"
    if not cram.is_dir() and cfg.output_dir is None:  # stage=glue alone: the newest earlier check's cram stage
        cram = max(DEFAULT_ROOT.glob("*/cram"), default=cram)
    if not cram.is_dir():
        raise CrammingError(f"stage=glue scores the cram stage's checkpoint, and {cram} does not exist: "
                            "run stage=cram first (or stage=all)")
    checkpoint = resolve_checkpoint(str(cram), out, key="output_dir")
    settings = {"tasks": list(cfg.glue_tasks), "data_dir": cfg.glue_dir, "device": cfg.device,
                "precision": "bf16" if cfg.device == "cuda" else "fp32"}
    if cfg.device == "cpu":
        settings.update(max_train_examples=32, epochs=1)
    results = run_glue(settings, checkpoint, out / "glue")
    return {"checkpoint": str(checkpoint), "settings": settings, "scores": results["scores"],
            "seconds_per_task": {name: round(task.get("wall_seconds", 0.0), 1)
                                 for name, task in results["tasks"].items()}}
