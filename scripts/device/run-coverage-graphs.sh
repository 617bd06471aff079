#!/usr/bin/env bash
# Runs on the lent GPU machine: kernel-timed task graphs of the coverage set (issue 18), one part.
# Exports the models named (experiments/python/export_torchscript.py, traced on the GPU), then
# experiments/python/coverage_graphs.py runs `nimble-bench infer --torchscript ... --mode
# graph,nimble --floor-graphs` on each in its own process: the one-stream graph's and Nimble's
# latencies, and the model's task graph with each op's kernel time. Builds nothing (.gpu/).
# Everything lands in $OUT/results.tgz (the device tool brings back few files).
#   usage: scripts/device/run-coverage-graphs.sh PART MODELS [SECONDS]
# SECONDS bounds the whole part (default 540), so that it ends inside the device's limit.
set -uo pipefail
part=${1:?usage: run-coverage-graphs.sh PART MODELS [SECONDS]}
models=${2:?usage: run-coverage-graphs.sh PART MODELS [SECONDS]}
budget=${3:-540}
started=$(date +%s)
PACK_RESULTS=1
. "$(dirname "$0")/setup.sh"
dir=${TMPDIR:-/tmp}/nimble-coverage-graphs-$part
rm -rf "$dir" && mkdir -p "$dir"
python3 experiments/python/export_torchscript.py "$dir" --only "$models" --device cuda 2>&1 | grep -E '^[a-z0-9_.-]+: ' > "$out/export-$part.log"
left=$((budget - ($(date +%s) - started) - 15))
echo "== export took $(($(date +%s) - started)) s; $left s left for the models"
python3 experiments/python/coverage_graphs.py "$dir" .gpu/nimble-bench "$out/graphs" --budget "$left" 2>&1 | tee "$out/coverage-graphs-$part.log"
status=${PIPESTATUS[0]}
cp "$out/nvidia-smi.csv" "$out/coverage-graphs-$part.nvidia-smi.csv"
pack_results
rm -rf "$dir"
echo "== part $part finished with status $status after $(($(date +%s) - started)) s"
exit "$status"
