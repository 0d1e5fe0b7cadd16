#!/usr/bin/env bash
# Install the project and its test tools. Torch first: an existing install (e.g. your CUDA build) is
# kept; otherwise torch==2.13.0, which pip takes as the CPU wheel on machines without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -c "import torch" 2>/dev/null || python3 -m pip install -q torch==2.13.0
python3 -m pip install -q -e ".[dev]"
