"""Shared test set-up: offline hub, offline W&B, a private cache, fast CPU math, and the order modules run in."""

import collections
import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")
# The start's look at the other processes' load (cramming.threads) would choose fewer threads on a busy machine, and
# numbers compared across runs would follow the load: an idle machine, unless a test injects another figure.
os.environ.setdefault("CRAMMING_BUSY_CORES", "0")
if os.environ.get("PYTEST_XDIST_WORKER"):
    # One torch thread per worker and per subprocess it starts: the workers already use every core, and two
    # thread pools per core spin against each other (measured: a 2-core machine did 1.7x the CPU work).
    os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402

torch.set_flush_denormal(True)


def pytest_collection_modifyitems(items) -> None:
    """The modules with the most end-to-end runs (marked slow) first, each module's tests together and in their
    order: scripts/test.sh hands whole modules to the workers (pytest-xdist --dist loadscope, so a module's
    fixtures run once, not once per worker), and the long modules starting first lets the workers end together."""
    slow_tests = collections.Counter(item.nodeid.split("::")[0] for item in items if item.get_closest_marker("slow"))
    items.sort(key=lambda item: -slow_tests[item.nodeid.split("::")[0]])  # stable: modules stay contiguous


REPO_ROOT = Path(__file__).resolve().parents[1]
# Subprocesses import this checkout's package: `python scripts/x.py` puts scripts/ first on sys.path, where
# the package is not, and an editable install may point at another checkout of it.
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"


@pytest.fixture
def cache_dir(tmp_path, monkeypatch) -> Path:
    """A fresh dataset cache, also exported for subprocesses."""
    path = tmp_path / "cache"
    monkeypatch.setenv("CRAMMING_CACHE", str(path))
    return path


@pytest.fixture(scope="session")
def session_cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("shared-cache")


@pytest.fixture
def shared_cache(session_cache, monkeypatch) -> Path:
    """One dataset cache for the whole test session, also exported for subprocesses: for runs that only read
    their prepared data, so each dataset is prepared once, not once a test. A test of the cache itself
    (preparing, reusing, damage) takes the fresh `cache_dir` instead."""
    monkeypatch.setenv("CRAMMING_CACHE", str(session_cache))
    return session_cache


@pytest.fixture(scope="session")
def gutenberg_valid() -> Path:
    path = SHARED_DATA / "corpus" / "gutenberg_en" / "valid-000.txt.gz"
    if not path.exists():
        pytest.skip(f"shared corpus not found at {path}")
    return path


SIMULATED_MICROBATCH_SECONDS = 0.125


@pytest.fixture
def simulated_clock(monkeypatch) -> float:
    """Budget-clocked runs (this process's and its subprocesses') read simulated time on which each
    microbatch takes SIMULATED_MICROBATCH_SECONDS: a budget buys the same microbatches at any load, on any
    machine. The wall clock itself is tested in tests/train/test_clock.py."""
    monkeypatch.setenv("CRAMMING_SIMULATED_MICROBATCH_SECONDS", str(SIMULATED_MICROBATCH_SECONDS))
    return SIMULATED_MICROBATCH_SECONDS
