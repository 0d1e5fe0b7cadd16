"""stage=quick: the GPU check in a short GPU slot (a hard 10-minute limit is common). A short version of each
stage (the tests marked quick, the eager bench, a 2-minute cram, RTE) runs in its own process,
`python -m cramming.cli.gpu_check stage=<part> ...`, its output shown and kept in <output_dir>/<part>.log.

A part still running at its limit (quick_limits) is stopped (SIGTERM, and SIGKILL 10 s later; a cram stops
after its step with a checkpoint), reported as failed with whatever it wrote (the tests part: each finished
test's outcome), and the next part runs. So the whole check ends within the sum of the limits, and a
command cut off earlier still leaves every part that ended, in <output_dir>.
"""

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import cramming
from cramming import quoted_override
from cramming.bench.gpu_report import record_stage
from cramming.bench.gpu_suite import read_outcomes

log = logging.getLogger("cramming.bench.gpu_check")
PARTS = {"tests": ["tests=quick"], "bench": ["bench_modes=[eager]"], "cram": [], "glue": ["glue_tasks=[rte]"]}
QUICK_CRAM_MINUTES = 2.0
GRACE_SECONDS = 10.0  # between SIGTERM and SIGKILL, within the part's limit


def run_quick(cfg, out: Path, device: str) -> dict:
    """Each part in turn in its own process; {part: its result} (an "error" where it failed)."""
    minutes = cfg.cram_minutes if cfg.cram_minutes is not None else QUICK_CRAM_MINUTES
    shared = [f"device={cfg.device}", quoted_override("output_dir", out.resolve()), f"cram_minutes={minutes}",
              f"bench_batch_size={cfg.bench_batch_size}"]
    shared += [quoted_override(key, getattr(cfg, key)) for key in ("data_files", "glue_dir")
               if getattr(cfg, key) is not None]
    return {part: run_part(part, [*shared, *settings], getattr(cfg.quick_limits, part), out, device)
            for part, settings in PARTS.items()}


def run_part(part: str, settings: list[str], limit: float, out: Path, device: str) -> dict:
    """The part's process under its limit; its result as it recorded it, or as far as it got."""
    for earlier in (out / f"{part}.json", out / f"{part}.md"):  # an earlier check's: not this one's result
        earlier.unlink(missing_ok=True)
    command = [sys.executable, "-m", "cramming.cli.gpu_check", f"stage={part}", *settings]
    package_root = str(Path(cramming.__file__).resolve().parents[1])  # the child imports this same cramming
    env = os.environ | {"PYTHONPATH": os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")]))}
    log.info("gpu_check: quick part %s, in its own process, at most %.0f s: %s", part, limit, " ".join(command[1:]))
    started = time.perf_counter()
    with open(out / f"{part}.log", "w") as transcript:
        child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                                 start_new_session=True)  # its own process group: stopped with its children
        copier = threading.Thread(target=_show_and_keep, args=(child.stdout, transcript), daemon=True)
        copier.start()
        stopped = _wait_or_stop(child, limit)
        copier.join(timeout=GRACE_SECONDS)
    written = out / f"{part}.json"
    result = json.loads(written.read_text()) if written.is_file() else {}
    if part == "tests" and not written.is_file():
        result = {"selection": "quick", **read_outcomes(out / "tests.jsonl")}  # the tests that ended
    if stopped:
        result["error"] = f"stopped at its {limit:.0f} s limit (quick_limits.{part})" + (
            f"; {result['error']}" if "error" in result else "")
    elif not written.is_file():
        result["error"] = f"its process exited with {child.returncode} before writing {written.name}"
    return record_stage(out, part, result, time.perf_counter() - started, device, what="quick part")


def _show_and_keep(stream, transcript) -> None:
    for line in stream:
        sys.stdout.write(line)
        sys.stdout.flush()
        transcript.write(line)
        transcript.flush()


def _wait_or_stop(child: subprocess.Popen, limit: float) -> bool:
    """Wait for the child; at its limit stop it and its children (True: it had to be stopped)."""
    try:
        child.wait(timeout=max(limit - GRACE_SECONDS, limit / 2))
        return False
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGTERM)
    try:
        child.wait(timeout=min(GRACE_SECONDS, limit / 2))
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()
    return True
