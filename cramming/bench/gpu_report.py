"""What the GPU check leaves in its output_dir as each stage ends: <stage>.json, a markdown section
<stage>.md, and report.md gathering the sections written so far (for docs/benchmarks.md)."""

import json
import logging
import time
from importlib.metadata import version
from pathlib import Path

log = logging.getLogger("cramming.bench.gpu_check")
STAGES = ("tests", "bench", "cram", "glue")


def record_stage(out: Path, stage: str, result: dict, seconds: float, device: str, what: str = "stage") -> dict:
    """Write the stage's result (an "error" marks it failed) and its section, rewrite report.md, and say how
    long it took; returns the result as written."""
    result = {**result, "stage_seconds": round(seconds, 1), "device": device}
    (out / f"{stage}.json").write_text(json.dumps(result, indent=2, allow_nan=False) + "\n")
    (out / f"{stage}.md").write_text(markdown(stage, result))
    (out / "report.md").write_text(report(out))
    outcome = f"FAILED: {result['error']}" if "error" in result else "ok"
    log.info("gpu_check: %s %s ended after %.0f s, %s; wrote %s", what, stage, seconds, outcome, out / f"{stage}.json")
    return result


def report(out: Path) -> str:
    """One markdown report: the versions, then each stage's section that exists in output_dir, in order."""
    sections = [(out / f"{stage}.md").read_text() for stage in STAGES if (out / f"{stage}.md").is_file()]
    versions = ", ".join(f"{name} {version(name)}" for name in ("torch", "torchao", "transformers"))
    header = f"## GPU check ({time.strftime('%Y-%m-%d')}): {versions}\n\n"
    return header + "\n".join(sections)


def markdown(stage: str, result: dict) -> str:
    """The stage's section: whether it failed and why, then whatever it measured (a stage stopped part way
    shows what it had)."""
    lines = [f"### gpu_check stage={stage} on {result['device']} ({result['stage_seconds']} s)", ""]
    if "error" in result:
        lines.append(f"- **failed**: {result['error']}")
    if stage == "tests" and "tests" in result:
        lines.append(f"- tests/gpu, the {result.get('selection', 'all')} selection: {result['passed']} passed, "
                     f"{len(result['failed'])} failed, {result['skipped']} skipped in {result['seconds']} s")
        lines += [f"- failed: `{test}`" for test in result["failed"]]
    elif stage == "bench":
        lines += _bench_lines(result)
    elif stage == "cram" and "summary" in result:
        s = result["summary"]
        validation = s.get("validation") or {}
        lines += [f"- steps {s['steps']}, tokens {s['tokens']:,}, {s['mean_tokens_per_s']} tokens/s "
                  f"(MFU {s['mean_mfu']}) with compilation, {s['steady_tokens_per_s']} tokens/s "
                  f"(MFU {s['steady_mfu']}) at steady state",
                  f"- loss {s['final_loss']}, validation loss {validation.get('first_loss')} → "
                  f"{validation.get('final_loss')}, energy {s['energy_wh']} Wh, peak memory {s['peak_memory_gb']} GiB",
                  f"- overrides: `{' '.join(result['overrides'])}`"]
    elif stage == "glue" and "seconds_per_task" in result:
        lines += ["| task | scores | seconds |", "|---|---|---|"]
        for name, seconds in result["seconds_per_task"].items():
            lines.append(f"| {name} | {_task_scores(result, name)} | {seconds} |")
    return "\n".join(lines) + "\n"


def _bench_lines(result: dict) -> list[str]:
    """Each mode's row (its peak memory is each model's own, measured in that mode's steps), then the SDPA
    kernel attention runs."""
    modes = [mode for mode in ("compiled", "eager") if mode in result]
    if not modes:
        return []
    lines = ["| mode | ours tokens/s | ours MFU | ours peak GiB | HF tokens/s | HF MFU | HF peak GiB | ratio |",
             "|---|---|---|---|---|---|---|---|"]
    for mode in modes:
        r = result[mode]
        mfu = [f"{100 * r[m]['mfu']:.1f}%" if r[m].get("mfu") is not None else "n/a" for m in ("ours", "hf_bert")]
        peak = [f"{r[m]['peak_memory_gib']:.2f}" if r[m].get("peak_memory_gib") is not None else "n/a"
                for m in ("ours", "hf_bert")]
        lines.append(f"| {mode} | {r['ours']['tokens_per_s']:,.0f} | {mfu[0]} | {peak[0]} "
                     f"| {r['hf_bert']['tokens_per_s']:,.0f} | {mfu[1]} | {peak[1]} | {r['ratio']:.2f}x |")
    if "sdpa_kernel" in result:
        lines += ["", f"SDPA kernel at the model's attention shape: {result['sdpa_kernel']}."]
    return lines


def _task_scores(result: dict, task: str) -> str:
    """e.g. `accuracy 66.4` or `pearson 85.1, spearman 84.9`; missing where the task had no data."""
    scores = result["scores"].get(task)
    return ", ".join(f"{metric} {value:.1f}" for metric, value in scores.items()) if scores else "missing"
