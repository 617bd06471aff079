#!/usr/bin/env bash
# Runs on the lent GPU machine: the device-side profile (`nimble-bench profile`) of each named
# model in the given modes, one JSON summary per model and mode under $OUT, the tables on
# stdout. With TESTS=1 it first runs the profiler's GPU test. Builds nothing (.gpu/ binaries).
#   usage: scripts/device/run-profile.sh [MODELS] [MODES]     e.g. efficientnet-b0,resnet50 nimble,graph
set -uo pipefail
models=${1:-efficientnet-b0}
modes=${2:-nimble}
. "$(dirname "$0")/setup.sh"
status=0
if [ "${TESTS:-0}" = 1 ]; then
    NIMBLE_REQUIRE_GPU=1 .gpu/tests/nimble-torch-gpu --test-threads=1 --nocapture device_profile > "$out/profile-gpu-test.log" 2>&1 || status=1
    grep -E "^test |test result|panicked" "$out/profile-gpu-test.log" | cut -c1-400
fi
for model in ${models//,/ }; do
    for mode in ${modes//,/ }; do
        .gpu/nimble-bench profile --model "$model" --mode "$mode" --top "${TOP:-40}" --out "$out/profile-$model-$mode.json" 2>&1 | grep -v "^ERROR:.*DeviceProperties\|^STAGE:" || status=1
    done
done
echo "== finished with status $status"
exit $status
