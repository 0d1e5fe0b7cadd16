#!/usr/bin/env bash
# Set up, then run the whole test suite offline (no hub, no W&B account).
#   --locked (first argument)   set up with the exact versions CI tests; other arguments go to pytest
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
  cat <<'USAGE'
usage: bash scripts/test.sh [--locked] [pytest arguments...]

Installs the project (scripts/setup.sh), checks the code with ruff (pyproject.toml's [tool.ruff]), then runs the
test suite offline, one worker per core (at most 4).
  --locked           install the exact versions CI tests (requirements/lock-cpu.txt), not the ranges
  pytest arguments   passed on: a test file or node id, -k EXPRESSION, -m "not slow", -x, ...
                     (pytest's own options: python3 -m pytest --help)
The whole suite takes 11 to 22 minutes on 2 cores; -m "not slow" leaves out the end-to-end runs.
USAGE
  exit 0
fi
setup=()
if [[ "${1:-}" == "--locked" ]]; then
  setup=(--locked)
  shift
fi
bash scripts/setup.sh ${setup[@]+"${setup[@]}"}
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 WANDB_MODE=offline
# The lint first (pyproject.toml's [tool.ruff]): a second, and a red run says which line
python3 -m ruff check --quiet .
# One test process per core (at most 4), each with one torch thread (tests/conftest.py); whole modules to a
# worker, so a module's shared runs are made once, the modules with the most long runs first (tests/conftest.py).
workers=$(python3 -c "from cramming.threads import usable_cores; print(min(4, usable_cores()))")
python3 -m pytest -q -n "$workers" --dist loadscope "$@"
