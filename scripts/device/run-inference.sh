#!/usr/bin/env bash
# Runs on the lent GPU machine: the inference comparison (`nimble-bench infer --model all
# --optimize both`: tch eager, TorchScript, one-stream graph and Nimble, the paper's method), and
# after the timing each Nimble graph's floor (the critical path by its ops' own kernel times,
# with the kernel-timed graphs). Builds nothing (.gpu/ binaries). Everything lands in
# $OUT/results.tgz (the device tool brings back few files), with the table on stdout.
#   usage: scripts/device/run-inference.sh [MODELS]
set -uo pipefail
models=${1:-all}
PACK_RESULTS=1
. "$(dirname "$0")/setup.sh"
status=0
.gpu/nimble-bench infer --model "$models" --optimize both --out "$out/inference.json" \
    --floor-graphs "$out/floor-graphs" > "$out/inference.txt" 2> "$out/inference-progress.log" || status=1
grep -v "^ERROR:.*DeviceProperties\|^STAGE:" "$out/inference-progress.log" | cut -c1-300 | tail -50
finish_packed inference "$status"
