#!/usr/bin/env bash
# GLUE fine-tuning and the two layouts' training step on one GPU, sized for a 15-minute slot (docs/benchmarks.md):
# the GLUE protocol's time on RTE, MRPC and STS-B at crammed-bert's shape, eager then compiled; then the
# training step of crammed-bert and of modern-bert at the same depth, compiled, in bf16, profiled; then
# crammed-bert's step with the compile mode max-autotune-no-cudagraphs.
#   bash scripts/gpu_glue_speed.sh <GLUE TSV folder> <output folder>
# Each command's output goes to <output folder>/<name>.txt as well. DRY_RUN=1 runs the same commands at toy
# size on the CPU, without compiling the training steps (inductor takes minutes there), to check the script.
set -euo pipefail
if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
  sed -n 2,8p "$0" | cut -c3-
  exit 0
fi
if [[ $# -ne 2 ]]; then
  echo "error: give the GLUE TSV folder and the output folder (bash $0 --help)" >&2
  exit 2
fi
glue=$1 out=$2
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 WANDB_MODE=offline
mkdir -p "$out"
if [[ "${DRY_RUN:-0}" == "1" ]]; then
  shape=(--layers 1 --hidden 32 --heads 2 --intermediate 64 --vocab 500 --steps 2 --device cpu)
  compile_steps=false
  step=(benchmark.layers=1 benchmark.batch_size=2 benchmark.steps=1 benchmark.warmup_steps=1
        benchmark.vocab_size=512 benchmark.device=cpu benchmark.dtype=fp32)
else
  shape=(--layers 16 --hidden 768 --heads 12 --intermediate 3072 --vocab 32768 --steps 50)
  compile_steps=true
  step=(benchmark.layers=16 benchmark.batch_size=128 benchmark.steps=10 benchmark.dtype=bf16)
fi
run() {  # name, then the command
  local name=$1
  shift
  echo "== $name: $*"
  "$@" 2>&1 | tee "$out/$name.txt"
}
for compile in false true; do
  run "glue-compile-$compile" python3 scripts/bench_glue_protocol.py --glue-dir "$glue" --tasks rte,mrpc,stsb \
    --compile "$compile" "${shape[@]}"
done
for arch in crammed-bert modern-bert; do
  run "step-$arch" python3 scripts/benchmark.py "arch=$arch" "benchmark.compile=$compile_steps" \
    benchmark.profile=true "benchmark.output_dir=$out/step-$arch" "${step[@]}"
done
if [[ "$compile_steps" == "true" ]]; then
  run "step-crammed-bert-max-autotune-no-cudagraphs" python3 scripts/benchmark.py arch=crammed-bert \
    benchmark.compile=true benchmark.compile_mode=max-autotune-no-cudagraphs \
    "benchmark.output_dir=$out/step-max-autotune" "${step[@]}"
fi
