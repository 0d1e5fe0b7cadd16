#!/usr/bin/env bash
# The default recipe against the original on one GPU (docs/recipes.md): configs/sweep/recipes-gpu.yaml at 150 s,
# then at 5 minutes, then the whole BLiMP and 64 held-out rows' bits per character on each final checkpoint.
#   bash scripts/gpu_recipes.sh <corpus glob> <BLiMP folder> <output folder> [override ...]
# Overrides go to every run; ZERO_SHOT_ARGS to every scoring. A dry run on the CPU, in minutes:
#   ZERO_SHOT_ARGS="pairs_per_paradigm=2" bash scripts/gpu_recipes.sh ... gpu=cpu arch=crammed-bert-tiny budget=0.0005
set -euo pipefail
if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
  sed -n 2,6p "$0" | cut -c3-
  exit 0
fi
if [[ $# -lt 3 ]]; then
  echo "error: give the corpus glob, the BLiMP folder and the output folder (bash $0 --help)" >&2
  exit 2
fi
corpus=$1 blimp=$2 out=$3
shift 3
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 WANDB_MODE=offline
extra=""
for override in "$@"; do extra+=",\"$override\""; done
for budget in 0.04167 0.0833; do
  # each budget is a sweep of its own; an override given after the script's arguments wins over this budget
  python3 scripts/ablate.py sweep=recipes-gpu "output_dir=$out/budget-$budget" \
    "overrides=[\"data.files='$corpus'\",\"budget=$budget\"$extra]"
  for run in "$out/budget-$budget"/runs/*/*/; do
    # shellcheck disable=SC2086  # ZERO_SHOT_ARGS: words, each one key=value
    python3 scripts/zero_shot.py "ckpt=$run" "blimp_dir=$blimp" "output_dir=${run}zero_shot" ${ZERO_SHOT_ARGS:-}
  done
done
