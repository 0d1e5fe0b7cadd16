#!/usr/bin/env bash
# Set up, then pretrain end to end on the embedded corpus: offline, CPU. The set-up downloads the packages the
# first time (minutes); the pretraining takes about 90 s on 2 idle cores (tiny model, 72 s of training; README.md).
# The run lands in outputs/quickstart/<timestamp>/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 WANDB_MODE=offline
python3 pretrain.py --config-name quickstart
