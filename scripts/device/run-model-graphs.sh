#!/usr/bin/env bash
# Runs on the lent GPU machine: the scheduler study (`nimble-bench schedulers`: every registered
# algorithm on every zoo model, measured) and then, in the same process after every
# measurement, each model's task graph with kernel-derived op times (--kernel-graphs), what
# the simulator is validated on (issue 18). First the kernel-timing and profiler GPU tests.
# Builds nothing (.gpu/ binaries). Everything lands in $OUT/results.tgz (the device tool
# brings back few files), with the tables on stdout.
#   usage: scripts/device/run-model-graphs.sh [MODELS]
set -uo pipefail
models=${1:-all}
PACK_RESULTS=1
. "$(dirname "$0")/setup.sh"
status=0
NIMBLE_REQUIRE_GPU=1 .gpu/tests/nimble-torch-gpu --test-threads=1 --nocapture kernel_timed device_profile > "$out/model-graphs-gpu-tests.log" 2>&1 || status=1
grep -E "^test |test result|panicked|inception-v3: replay" "$out/model-graphs-gpu-tests.log" | cut -c1-400
.gpu/nimble-bench schedulers --models "$models" --results "$out/schedulers.json" --out-dir "$out/figs" \
    --kernel-graphs "$out/model-graphs" > "$out/schedulers.txt" 2> "$out/schedulers-progress.log" || status=1
grep -v "^ERROR:.*DeviceProperties\|^STAGE:" "$out/schedulers-progress.log" | cut -c1-300 | tail -40
finish_packed schedulers "$status"
