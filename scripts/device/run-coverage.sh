#!/usr/bin/env bash
# Runs on the lent GPU machine: one part of the coverage experiment. Exports the models named
# (experiments/python/export_torchscript.py, this machine's PyTorch, torchvision and
# transformers, traced on the GPU), then runs them all with `nimble-bench coverage`, each model
# in its own process. Builds nothing: uses .gpu/ (scripts/build-gpu-binaries.sh).
# Files on the machine do not outlive it, so every part exports what it measures. Writes
# $OUT/coverage-PART.json (rewritten after every model, so a part cut short keeps what it
# measured) and $OUT/coverage-PART.log; merge the parts here with
#   nimble-bench coverage --merge coverage-1.json,coverage-2.json,...
#   usage: [SET=torchvision-families|transformers-families] scripts/device/run-coverage.sh PART MODELS [SECONDS]
# SET picks the exporter's set the models come from (default all: classification and encoders).
# SECONDS bounds the whole part (default 540), so that it ends inside the device's limit.
set -uo pipefail
part=${1:?usage: run-coverage.sh PART MODELS [SECONDS]}
models=${2:?usage: run-coverage.sh PART MODELS [SECONDS]}
budget=${3:-540}
started=$(date +%s)
. "$(dirname "$0")/setup.sh"
dir=${TMPDIR:-/tmp}/nimble-coverage-$part
rm -rf "$dir" && mkdir -p "$dir"
python3 experiments/python/export_torchscript.py "$dir" --set "${SET:-all}" --only "$models" --device cuda 2>&1 | grep -E '^[a-z0-9_.-]+: ' | tee "$out/export-$part.log"
left=$((budget - ($(date +%s) - started)))
echo "== export took $(($(date +%s) - started)) s; $left s left for the models"
timeout "$left" .gpu/nimble-bench coverage "$dir" --timeout 240 --results "$out/coverage-$part.json" --out-dir "$out/figure-$part" 2>&1 | tee "$out/coverage-$part.log" | grep -E "^\[|^[0-9]+ of|^prepare|^Nimble against"
status=${PIPESTATUS[0]}
rm -rf "$dir"
echo "== part $part finished with status $status after $(($(date +%s) - started)) s"
exit "$status"
