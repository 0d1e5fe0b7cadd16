"""The GPU test suite (tests/gpu, marker `gpu`) run from a checkout as a subprocess, each test's outcome
logged as it ends (cramming.bench.pytest_outcomes): the first stage of the GPU check, so a GPU run
proves every command before it measures anything."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

from cramming import CONFIG_DIR

SUITE = Path("tests") / "gpu"
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "WANDB_MODE": "offline"}
# tests=all: every GPU test; tests=quick: those marked quick, each stopped after 60 s (stage=quick's part)
SELECTIONS = {"all": ["-m", "gpu"], "quick": ["-m", "gpu and quick", "--timeout=60"]}
TOOLS = {"pytest": "pytest", "pytest_timeout": "pytest-timeout"}  # module: package (addopts pass --timeout)


def checkout_root() -> Path | None:
    """The repository around configs/, when this is a checkout (an installed wheel carries no tests)."""
    root = CONFIG_DIR.parent
    return root if (root / SUITE).is_dir() else None


def missing_tools() -> list[str]:
    return [package for module, package in TOOLS.items() if importlib.util.find_spec(module) is None]


def run_gpu_suite(outcomes: Path, selection: str = "all") -> dict:
    """`pytest -m gpu tests/gpu` (or the quick selection), its output shown as it runs; counts, failed test
    ids and seconds, from `outcomes` (one JSON line per test, written as each ends). An "error" says why the
    suite did not run in full: tooling missing, no checkout, pytest stopping early. Without a GPU every test
    skips: what a CPU dry run checks is that the suite is collected and runs."""
    root, missing = checkout_root(), missing_tools()
    if missing:
        return {"error": f"{' and '.join(missing)} not installed, which the GPU suite needs (pyproject's addopts "
                         f"pass --timeout): pip install {' '.join(missing)}"}
    if root is None:
        return {"error": f"no {SUITE} next to {CONFIG_DIR} (an installed package): run from a clone"}
    outcomes.unlink(missing_ok=True)
    command = [sys.executable, "-m", "pytest", "-q", *SELECTIONS[selection], "-p", "no:cacheprovider",
               "-p", "cramming.bench.pytest_outcomes", f"--outcomes={outcomes.resolve()}", str(SUITE)]
    code = subprocess.run(command, cwd=root, env=os.environ | OFFLINE, check=False).returncode
    result = {"exit_code": code, **read_outcomes(outcomes)}
    if code not in (0, 1) or not result["tests"]:  # 1: some tests failed (listed); else pytest stopped early
        result["error"] = f"pytest exited with {code} after {result['tests']} test(s)"
    return result


def read_outcomes(path: Path) -> dict:
    """Counts of the tests logged in `path`, the failed ones' ids and the seconds they took."""
    outcomes, seconds = {}, 0.0
    lines = path.read_text().splitlines() if path.is_file() else []
    for line in map(json.loads, lines):
        seconds += line["seconds"]
        if outcomes.get(line["test"]) != "failed":  # a teardown's error fails a test whose call passed
            outcomes[line["test"]] = line["outcome"]
    failed = [test for test, outcome in outcomes.items() if outcome == "failed"]
    skipped = sum(outcome == "skipped" for outcome in outcomes.values())
    return {"tests": len(outcomes), "passed": len(outcomes) - len(failed) - skipped, "skipped": skipped,
            "failed": failed, "seconds": round(seconds, 1)}
