#!/usr/bin/env bash
# Runs on the lent GPU machine: nimble-torch's GPU tests, then the inference comparison
# (eager / one-stream graph / Nimble, with and without the inference rewrites) on the zoo's
# models, and CUDA exports of three models' task graphs (with measured op times). Builds
# nothing: uses the binaries carried in .gpu/ (scripts/build-gpu-binaries.sh). Everything
# lands under $OUT. TEST_REPLAYS=0 skips the GPU tests.
#   usage: scripts/device/run-torch-suite.sh [MODELS] [TEST_REPLAYS]
set -uo pipefail
models=${1:-all}
export NIMBLE_TEST_REPLAYS=${2:-1000}
. "$(dirname "$0")/setup.sh"
status=0
if [ "$NIMBLE_TEST_REPLAYS" != 0 ] && [ -x .gpu/tests/nimble-torch-gpu ]; then
    NIMBLE_REQUIRE_GPU=1 .gpu/tests/nimble-torch-gpu --test-threads=1 --nocapture > "$out/torch-gpu-tests.log" 2>&1 || status=1
    NIMBLE_REQUIRE_GPU=1 .gpu/tests/nimble-torch-gpu_torchscript --test-threads=1 --nocapture >> "$out/torch-gpu-tests.log" 2>&1 || status=1
    NIMBLE_REQUIRE_GPU=1 .gpu/tests/nimble-torch-linear_ops --test-threads=1 --nocapture >> "$out/torch-gpu-tests.log" 2>&1 || status=1
    NIMBLE_REQUIRE_GPU=1 .gpu/tests/nimble-torch-conv_relu --test-threads=1 --nocapture >> "$out/torch-gpu-tests.log" 2>&1 || status=1
    grep -E "^test |test result|rel. error|kernel nodes|allocated bytes|panicked" "$out/torch-gpu-tests.log" | cut -c1-400
fi
for model in inception-v3 resnet50 nasnet-a-mobile; do
    .gpu/nimble-bench export-graph --model $model --device cuda --optimize --out "$out/$model.graph.json" || status=1
done
.gpu/nimble-bench infer --model "$models" --optimize both --out "$out/inference.json" 2>"$out/infer-progress.log" > "$out/infer.txt" || status=1
cat "$out/infer-progress.log" | cut -c1-300
echo "== finished with status $status"
cat "$out/infer.txt"
exit $status
