#!/usr/bin/env bash
# Install the project and its test tools. Torch first: an existing install (e.g. your CUDA build) is
# kept; otherwise torch==2.13.0, which pip takes as the CPU wheel on machines without a GPU.
#   --locked   the exact versions CI tests (requirements/lock-cpu.txt; docs/reproduce.md), not the ranges
set -euo pipefail
cd "$(dirname "$0")/.."
locked=false
for argument in "$@"; do
  case "$argument" in
    --locked) locked=true ;;
    *) echo "error: unknown option $argument (scripts/setup.sh takes --locked)" >&2; exit 2 ;;
  esac
done
python3 -c "import torch" 2>/dev/null || python3 -m pip install -q torch==2.13.0
if $locked; then
  # everything but torch (kept as installed above) at the tested versions, then the project itself
  python3 -m pip install -q -r <(grep -v '^torch==' requirements/lock-cpu.txt)
  python3 -m pip install -q --no-deps -e .
else
  python3 -m pip install -q -e ".[dev]"
fi
