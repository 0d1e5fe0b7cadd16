"""The first-GPU check (`scripts/gpu_check.py`): in stages that each fit one 10-minute command, what a GPU
session should check and measure first, written as JSON and markdown sections for docs/benchmarks.md, and
gathered into one <output_dir>/report.md after every stage.

- tests: the GPU test suite (tests/gpu: every command and GPU-only option on the GPU), from a checkout;
- bench: the full-size step, ours vs transformers' BertForMaskedLM, compiled and eager (scripts/benchmark.py);
- cram: a few minutes of real pretraining on the corpus shards at hand, validation curve and telemetry on;
- glue: RTE, MRPC and STS-B on the cram stage's checkpoint, with the time per task.

`device=cpu` runs the same stages with a tiny model as a dry run (how the test suite checks the wiring);
the measurements are only meaningful on the GPU.
"""

import json
import logging
import time
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Optional

import torch

from cramming.composition import compose_config
from cramming.errors import CrammingError

log = logging.getLogger(__name__)
STAGES = ("tests", "bench", "cram", "glue")
GLUE_TASKS = ["rte", "mrpc", "stsb"]


@dataclass
class GpuCheckConfig:
    stage: str = "all"  # tests | bench | cram | glue | all
    device: str = "cuda"  # cuda | cpu (a dry run with a tiny model: checks the wiring, measures nothing)
    output_dir: str = "outputs/gpu_check"
    data_files: Optional[str] = None  # corpus shards for the cram stage (a glob); null: the embedded corpus
    glue_dir: Optional[str] = None  # classic GLUE TSV layout for the glue stage; null: the hub
    cram_minutes: float = 5.0  # training time of the cram stage (on the budget clock)
    bench_batch_size: int = 128  # sequences per step of the bench stage (full size, bf16)


def run_gpu_check(cfg: GpuCheckConfig) -> dict:
    """Run the stage(s); each writes <output_dir>/<stage>.json and .md, then report.md holds every stage's
    section so far. Returns {stage: result}; a failed GPU test is an error once the stages have run."""
    if cfg.stage not in (*STAGES, "all"):
        raise CrammingError(f"stage={cfg.stage!r} must be one of {', '.join(STAGES)}, all")
    if cfg.device not in ("cuda", "cpu"):
        raise CrammingError(f"device={cfg.device!r} must be cuda or cpu (a dry run)")
    if cfg.device == "cuda" and not torch.cuda.is_available():
        raise CrammingError("gpu_check needs a CUDA GPU (torch.cuda.is_available() is False here); "
                            "device=cpu runs the stages as a dry run with a tiny model")
    out = Path(cfg.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    stages = STAGES if cfg.stage == "all" else (cfg.stage,)
    results = {}
    for stage in stages:
        log.info("gpu_check: stage %s", stage)
        started = time.perf_counter()
        result = {"tests": _tests, "bench": _bench, "cram": _cram, "glue": _glue}[stage](cfg, out)
        result["stage_seconds"] = round(time.perf_counter() - started, 1)
        result["device"] = torch.cuda.get_device_name() if cfg.device == "cuda" else "cpu (dry run)"
        (out / f"{stage}.json").write_text(json.dumps(result, indent=2, allow_nan=False) + "\n")
        (out / f"{stage}.md").write_text(_markdown(stage, result))
        (out / "report.md").write_text(_report(out))
        log.info("gpu_check: wrote %s and .md; report %s", out / f"{stage}.json", out / "report.md")
        results[stage] = result
    failed = results.get("tests", {}).get("failed")
    if failed:
        raise CrammingError(f"gpu_check: {len(failed)} GPU test(s) failed ({', '.join(failed)}); see the tests stage "
                            f"in {out / 'report.md'}")
    return results


def _report(out: Path) -> str:
    """One markdown report: the versions, then each stage's section that exists in output_dir, in order."""
    sections = [(out / f"{stage}.md").read_text() for stage in STAGES if (out / f"{stage}.md").is_file()]
    versions = ", ".join(f"{name} {version(name)}" for name in ("torch", "torchao", "transformers"))
    header = f"## GPU check ({time.strftime('%Y-%m-%d')}): {versions}\n\n"
    return header + "\n".join(sections)


def _tests(cfg: GpuCheckConfig, out: Path) -> dict:
    from cramming.bench.gpu_suite import run_gpu_suite

    return run_gpu_suite(out / "tests.xml")


def _bench(cfg: GpuCheckConfig, out: Path) -> dict:
    from cramming.bench.benchmark import run_benchmark

    if cfg.device == "cuda":
        common = ["arch=crammed-bert", "benchmark.dtype=bf16", f"benchmark.batch_size={cfg.bench_batch_size}"]
    else:
        common = ["arch=crammed-bert-tiny", "benchmark.batch_size=4", "benchmark.steps=1", "benchmark.warmup_steps=1",
                  "benchmark.vocab_size=512"]
    common += [f"benchmark.device={cfg.device}", f"benchmark.output_dir={out / 'bench'}"]
    results = {}
    for mode in ("compiled", "eager") if cfg.device == "cuda" else ("eager",):  # no compiler in the dry run
        overrides = common + [f"benchmark.compile={mode == 'compiled'}"]
        results[mode] = json.loads(run_benchmark(compose_config("benchmark", overrides)).read_text())
    if cfg.device == "cuda":
        results["sdpa_backend"] = _sdpa_backend()
        results["peak_memory_gb"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
    return results


def _sdpa_backend() -> str:
    """Which fused attention kernel SDPA picks at the model's shapes in bf16 (flash, efficient, cuDNN)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q = torch.randn(8, 12, 128, 64, device="cuda", dtype=torch.bfloat16)
    for backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION, SDPBackend.EFFICIENT_ATTENTION):
        try:
            with sdpa_kernel(backend):
                torch.nn.functional.scaled_dot_product_attention(q, q, q)
            return backend.name.lower()
        except RuntimeError:  # this kernel does not run here: try the next
            continue
    return "math"


def _cram(cfg: GpuCheckConfig, out: Path) -> dict:
    from cramming.train.config import PretrainConfig  # noqa: F401  (registers the schemas pretrain.yaml names)
    from cramming.train.trainer import pretrain

    data = ["data=embedded"] if cfg.data_files is None else ["data=local", f"data.files={cfg.data_files}"]
    arch = ["arch=crammed-bert", "gpu=auto"] if cfg.device == "cuda" else ["arch=crammed-bert-tiny", "gpu=cpu"]
    overrides = [*data, *arch, f"budget={cfg.cram_minutes / 60}", "name=cram", f"output_dir={out}",
                 f"cache_dir={out / 'cache'}", "logging.progress=lines"]
    run_dir = pretrain(compose_config("pretrain", overrides))
    summary = json.loads((run_dir / "summary.json").read_text())
    return {"run_dir": str(run_dir), "overrides": overrides, "summary": summary}


def _glue(cfg: GpuCheckConfig, out: Path) -> dict:
    from cramming.eval.run import run_glue
    from cramming.runs import resolve_checkpoint

    if not (out / "cram").is_dir():
        raise CrammingError(f"stage=glue scores the cram stage's checkpoint, and {out / 'cram'} does not exist: "
                            "run stage=cram first (or stage=all)")
    checkpoint = resolve_checkpoint(str(out / "cram"), out, key="output_dir")
    settings = {"tasks": GLUE_TASKS, "data_dir": cfg.glue_dir, "device": cfg.device,
                "precision": "bf16" if cfg.device == "cuda" else "fp32"}
    if cfg.device == "cpu":
        settings.update(max_train_examples=32, epochs=1)
    results = run_glue(settings, checkpoint, out / "glue")
    return {"checkpoint": str(checkpoint), "settings": settings, "scores": results["scores"],
            "seconds_per_task": {name: round(task.get("wall_seconds", 0.0), 1) for name, task in results["tasks"].items()}}


def _markdown(stage: str, result: dict) -> str:
    lines = [f"### gpu_check stage={stage} on {result['device']} ({result['stage_seconds']} s)", ""]
    if stage == "tests" and not result["ran"]:
        lines.append(f"- not run: {result['reason']}")
    elif stage == "tests":
        lines.append(f"- `pytest -m gpu tests/gpu`: {result['passed']} passed, {len(result['failed'])} failed, "
                     f"{result['skipped']} skipped in {result['seconds']} s")
        lines += [f"- failed: `{test}`" for test in result["failed"]]
    elif stage == "bench":
        lines += ["| mode | ours tokens/s | ours MFU | HF tokens/s | HF MFU | ratio |", "|---|---|---|---|---|---|"]
        for mode in ("compiled", "eager"):
            if mode not in result:
                continue
            r = result[mode]
            mfu = [f"{100 * r[m]['mfu']:.1f}%" if r[m].get("mfu") is not None else "n/a" for m in ("ours", "hf_bert")]
            lines.append(f"| {mode} | {r['ours']['tokens_per_s']:,.0f} | {mfu[0]} | {r['hf_bert']['tokens_per_s']:,.0f} "
                         f"| {mfu[1]} | {r['ratio']:.2f}x |")
        if "sdpa_backend" in result:
            lines += ["", f"SDPA backend: {result['sdpa_backend']}; peak memory {result['peak_memory_gb']} GiB."]
    elif stage == "cram":
        s = result["summary"]
        validation = s.get("validation") or {}
        lines += [f"- steps {s['steps']}, tokens {s['tokens']:,}, {s['mean_tokens_per_s']} tokens/s (MFU {s['mean_mfu']}) with "
                  f"compilation, {s['steady_tokens_per_s']} tokens/s (MFU {s['steady_mfu']}) at steady state",
                  f"- loss {s['final_loss']}, validation loss {validation.get('first_loss')} → "
                  f"{validation.get('final_loss')}, energy {s['energy_wh']} Wh, peak memory {s['peak_memory_gb']} GiB",
                  f"- overrides: `{' '.join(result['overrides'])}`"]
    else:
        lines += ["| task | scores | seconds |", "|---|---|---|"]
        for name, seconds in result["seconds_per_task"].items():
            lines.append(f"| {name} | {_task_scores(result, name)} | {seconds} |")
    return "\n".join(lines) + "\n"


def _task_scores(result: dict, task: str) -> str:
    """e.g. `accuracy 66.4` or `pearson 85.1, spearman 84.9`; missing where the task had no data."""
    scores = result["scores"].get(task)
    return ", ".join(f"{metric} {value:.1f}" for metric, value in scores.items()) if scores else "missing"
