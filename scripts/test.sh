#!/usr/bin/env bash
# Set up, then run the whole test suite offline (no hub, no W&B account).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 WANDB_MODE=offline
python3 -m pytest -q "$@"
