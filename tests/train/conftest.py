"""One uninterrupted step-driven run shared by the training tests that compare with it or resume a copy of
it: the same eight steps every time (tests/train/runs.py STEP_RUN), trained once per test session."""

from pathlib import Path

import pytest

from cramming.pretraining import pretrain
from tests.train.runs import STEP_RUN, compose_config


@pytest.fixture(scope="session")
def straight_run(tmp_path_factory, session_cache) -> Path:
    """STEP_RUN with every step's checkpoint kept, and its plots (a resume of it draws them too). Read it only: a
    test that resumes or damages it works on `copy_run(straight_run, ...)`."""
    root = tmp_path_factory.mktemp("straight")
    return pretrain(compose_config(STEP_RUN + [f"output_dir={root}", "checkpoint.keep_last=8",
                                               f"cache_dir={session_cache}", "logging.plots=true"]))
