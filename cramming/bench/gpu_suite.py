"""The GPU test suite (tests/gpu, marker `gpu`) run from a checkout as a subprocess, its outcome read from
pytest's JUnit XML: the first stage of the GPU check, so a GPU session proves every command before it
measures anything."""

import os
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path

from cramming import CONFIG_DIR

SUITE = Path("tests") / "gpu"
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "WANDB_MODE": "offline"}


def checkout_root() -> Path | None:
    """The repository around configs/, when this is a checkout (an installed wheel carries no tests)."""
    root = CONFIG_DIR.parent
    return root if (root / SUITE).is_dir() else None


def run_gpu_suite(report_xml: Path) -> dict:
    """`pytest -m gpu tests/gpu`, its output shown as it runs; counts, failed test ids and seconds.
    Without a GPU every test skips: what a CPU dry run checks is that the suite is collected and runs."""
    root = checkout_root()
    if root is None:
        return {"ran": False, "reason": f"no {SUITE} next to {CONFIG_DIR} (an installed package): run from a clone"}
    command = [sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider", str(SUITE),
               f"--junitxml={report_xml.resolve()}"]
    finished = subprocess.run(command, cwd=root, env=os.environ | OFFLINE, check=False)
    if not report_xml.is_file():
        return {"ran": False, "reason": f"pytest exited with {finished.returncode} before writing {report_xml}"}
    return {"ran": True, "exit_code": finished.returncode, **read_junit(report_xml)}


def read_junit(path: Path) -> dict:
    suite = ElementTree.parse(path).getroot()
    suite = suite.find("testsuite") if suite.tag == "testsuites" else suite
    failed = [f"{case.get('classname')}::{case.get('name')}" for case in suite.iter("testcase")
              if case.find("failure") is not None or case.find("error") is not None]
    total, skipped = int(suite.get("tests", 0)), int(suite.get("skipped", 0))
    return {"tests": total, "passed": total - skipped - len(failed), "skipped": skipped, "failed": failed,
            "seconds": round(float(suite.get("time", 0.0)), 1)}
