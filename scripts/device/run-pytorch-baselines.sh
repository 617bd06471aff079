#!/usr/bin/env bash
# Runs on the lent GPU machine: the Python PyTorch baselines of the inference comparison
# (experiments/python/baselines.py) on nimble-bench's own model list, with that machine's
# PyTorch. The record lands in $OUT/pytorch-baselines.json (or the file named by RECORD).
# TRAINING=1: the training comparison instead (systems train-eager,train-graph; BATCHES).
#   usage: scripts/device/run-pytorch-baselines.sh [MODELS] [SYSTEMS]
set -uo pipefail
models=${1:-all}
training=()
if [ "${TRAINING:-0}" = 1 ]; then
    training=(--training --batches "${BATCHES:-32,64,128}")
    default_systems=train-eager,train-graph
fi
systems=${2:-${default_systems:-eager,torchscript,compile}}
. "$(dirname "$0")/setup.sh"
.gpu/nimble-bench models --json > "$out/models.json" || exit 1
python3 experiments/python/baselines.py --models-json "$out/models.json" --out "$out/${RECORD:-pytorch-baselines.json}" \
    --models "$models" --systems "$systems" --commit "$(cat .gpu/COMMIT 2>/dev/null || echo unknown)" "${training[@]}"
