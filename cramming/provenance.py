"""What produced a run: the code, the interpreter and key packages, the machine, the config and the data.

Recorded in summary.json, in every checkpoint's config.json and in GLUE results, so that two runs that
disagree can say why (scripts/compare_runs.py).
"""

import hashlib
import json
import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path

import pynvml
import torch

import cramming

KEY_PACKAGES = ("torch", "transformers", "tokenizers", "datasets", "safetensors", "numpy", "hydra-core",
                "omegaconf", "scikit-learn", "scipy", "wandb")


def git_state() -> dict:
    """The commit of the checkout the code runs from, and whether its tracked files differ from it; an
    installed wheel has none."""
    root = Path(cramming.__file__).resolve().parents[1]

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    if git("rev-parse", "--show-toplevel") != str(root):  # not our checkout (e.g. a wheel in some repo's venv)
        return {"git_commit": None, "git_dirty": None}
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"git_commit": git("rev-parse", "HEAD"), "git_dirty": None if status is None else bool(status)}


def package_versions() -> dict[str, str | None]:
    versions = {}
    for name in KEY_PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def cpu_model() -> str:
    """The CPU's model name (from /proc/cpuinfo on Linux), else what the platform reports."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def device_description(device: torch.device) -> dict:
    """The accelerator and its driver, or the CPU."""
    if device.type != "cuda":
        return {"type": "cpu", "name": cpu_model(), "cores": os.cpu_count(), "threads": torch.get_num_threads()}
    described = {"type": "cuda", "name": torch.cuda.get_device_name(device), "driver": None,
                 "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version()}
    try:
        pynvml.nvmlInit()
        described["driver"] = pynvml.nvmlSystemGetDriverVersion()
        pynvml.nvmlShutdown()
    except Exception:  # no NVML here (some containers): the driver stays unknown
        pass
    return described


def config_sha256(config: dict) -> str:
    """A fingerprint of a resolved config (keys sorted)."""
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()


def provenance(device: torch.device) -> dict:
    return {
        "cramming": cramming.__version__,
        **git_state(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "packages": package_versions(),
        "device": device_description(device),
    }
