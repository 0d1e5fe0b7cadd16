#!/usr/bin/env bash
# Set up, then run the pipeline end to end on the embedded corpus: offline, CPU, a few minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 WANDB_MODE=offline
python3 scripts/prepare_data.py data=embedded
