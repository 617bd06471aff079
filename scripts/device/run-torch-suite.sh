#!/usr/bin/env bash
# Runs on the lent GPU machine: nimble-torch's GPU tests, then the inference comparison
# (eager / one-stream graph / Nimble, with and without the inference rewrites) on the paper's
# tch::vision models, and a CUDA export of Inception-v3's task graph. Builds nothing: uses the
# binaries carried in .gpu/ (scripts/build-gpu-binaries.sh). Everything lands under $OUT.
#   usage: scripts/device/run-torch-suite.sh [MODELS] [TEST_REPLAYS]
set -uo pipefail
models=${1:-all}
export NIMBLE_TEST_REPLAYS=${2:-1000}
. "$(dirname "$0")/setup.sh"
status=0
if [ -x .gpu/tests/nimble-torch-gpu ]; then
    NIMBLE_REQUIRE_GPU=1 .gpu/tests/nimble-torch-gpu --test-threads=1 --nocapture > "$out/torch-gpu-tests.log" 2>&1 || status=1
    grep -E "^test |test result|rel. error|kernel nodes|allocated bytes|panicked" "$out/torch-gpu-tests.log" | cut -c1-400
fi
for model in inception-v3 resnet50; do
    .gpu/nimble-bench export-graph --model $model --device cuda --optimize --out "$out/$model.graph.json" || status=1
done
.gpu/nimble-bench infer --model "$models" --optimize both --out "$out/inference.json" 2>"$out/infer-progress.log" > "$out/infer.txt" || status=1
cat "$out/infer-progress.log" | cut -c1-300
echo "== finished with status $status"
cat "$out/infer.txt"
exit $status
