"""Run a command's entry point in this process, as `python <command> args...` would: its main() reads the
given argv through Hydra and the error boundary. A subprocess costs seconds of interpreter and torch start;
the many variants of one command run here, and each command and flag family keeps a real subprocess run."""

import contextlib
import importlib
import io
import os
import subprocess
import sys
from pathlib import Path

from hydra.core.global_hydra import GlobalHydra

from tests.conftest import REPO_ROOT

SCRIPTS = {"pretrain": "pretrain.py", "eval_glue": "eval_glue.py", "ablate": "scripts/ablate.py",
           "export": "scripts/export.py", "prepare_data": "scripts/prepare_data.py",
           "calculator": "scripts/calculator.py", "benchmark": "scripts/benchmark.py",
           "gpu_check": "scripts/gpu_check.py", "plot_runs": "scripts/plot_runs.py",
           "compare_runs": "scripts/compare_runs.py", "launch": "scripts/launch.py",
           "zero_shot": "scripts/zero_shot.py"}


def in_process(name: str, *arguments: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """cramming.cli.<name>.main() with sys.argv set, stdout and stderr captured apart, SystemExit as the
    exit code: what a subprocess run of the script would return."""
    main = importlib.import_module(f"cramming.cli.{name}").main
    argv, before, stdout, stderr = sys.argv, os.getcwd(), io.StringIO(), io.StringIO()
    sys.argv = [str(REPO_ROOT / SCRIPTS[name]), *arguments]
    code = 0
    try:
        if cwd is not None:
            os.chdir(cwd)
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            main()
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    finally:
        sys.argv = argv
        os.chdir(before)
        GlobalHydra.instance().clear()  # a command stopped inside its Hydra app leaves it initialized
    return subprocess.CompletedProcess(sys.argv, code, stdout.getvalue(), stderr.getvalue())


def in_subprocess(name: str, *arguments: str, cwd: Path = REPO_ROOT, timeout: int = 120,
                  env: dict[str, str | None] | None = None) -> subprocess.CompletedProcess:
    """`python <script> args...` as a user types it; `env` sets variables for it (None: unset)."""
    changes = (env or {}) | {"PYTHONPATH": str(REPO_ROOT)}
    env = {key: value for key, value in (os.environ | changes).items() if value is not None}
    return subprocess.run([sys.executable, str(REPO_ROOT / SCRIPTS[name]), *arguments], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def modules_after(code: str) -> set[str]:
    """The modules a fresh interpreter holds after running `code`: what an import or a start costs."""
    run = subprocess.run([sys.executable, "-c", f"{code}\nimport sys\nprint(*sys.modules)"], capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    return set(run.stdout.split())
