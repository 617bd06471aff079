#!/usr/bin/env bash
# Runs on the lent GPU machine: half precision, Nimble's distance from eager against the
# compiler's. For the family models named, experiments/python/half_precision.py (bfloat16 and
# float16, no timing); for each "MODELS:DTYPE" cell of SAME_PROCESS, experiments/python/
# same_process.py on the same-process models (eager, reduce-overhead, nimble_rs.Nimble, one
# round, timed). Builds nothing (.gpu/, scripts/build-gpu-binaries.sh). With RUST_TESTS=1 the
# nimble-torch GPU tests run first (required). Results are packed into $OUT/half.tgz, the table
# printed last. The family groups run first, side by side, then the same-process cells one at a
# time (CELL_SECONDS each, default 300; CELL_CHECKS fresh inputs each, default 5).
#   usage: [SAME_PROCESS="resnet50,googlenet:bfloat16 ..."] scripts/device/run-half-precision.sh SECONDS ["a,b c,d ..."]
#   (each space-separated group of family models in a process of its own, run side by side;
#   CHECKS=N fresh inputs per model, default 3; SYSTEMS=compile,nimble,nimble-no-rewrites,... the
#   systems and Nimble variants to compare, half_precision.py --systems)
set -uo pipefail
budget=${1:?seconds for the family models}
models=${2:-}
export PACK_RESULTS=1 RESULTS_NAME=half
. "$(dirname "$0")/setup.sh"
install_nimble_rs
commit=$(cat .gpu/COMMIT 2>/dev/null || echo unknown)
status=0
: > "$out/half.txt"
if [ "${RUST_TESTS:-0}" = 1 ]; then
    NIMBLE_REQUIRE_GPU=1 timeout 200 .gpu/tests/nimble-torch-gpu --test-threads=1 > "$out/nimble-torch-gpu-tests.log" 2>&1
    tests_status=$?
    [ "$tests_status" = 0 ] || status=$tests_status
    { echo "== nimble-torch GPU tests (status $tests_status)"; grep -E "^test result|FAILED|panicked" "$out/nimble-torch-gpu-tests.log" | head -8; } >> "$out/half.txt"
fi
.gpu/nimble-bench models --json > "$out/models.json" || exit 1
# Each space-separated group of family models runs in a process of its own, all at once (no
# timing is taken, and Inductor's compiles, most of the time, spread over the cores).
group=0
pids=()
for models_group in $models; do
    group=$((group + 1))
    (cd experiments/python && timeout "$((budget + 120))" python3 half_precision.py --out "$out/half-precision-$group.json" --models "$models_group" --seconds "$budget" --checks "${CHECKS:-3}" --systems "${SYSTEMS:-compile,nimble}" \
        --commit "$commit" > "$out/half-precision-$group.table" 2> "$out/half-precision-$group.log") &
    pids+=($!)
done
for i in "${!pids[@]}"; do
    wait "${pids[$i]}"
    family_status=$?
    [ "$family_status" = 0 ] || status=$family_status
    { echo "== families, group $((i + 1)) (status $family_status)"; cat "$out/half-precision-$((i + 1)).table"; grep -E "failed|Error" "$out/half-precision-$((i + 1)).log" | tail -5; } >> "$out/half.txt"
done
# The same-process cells are timed: one at a time, after the untimed groups are done.
for cell in ${SAME_PROCESS:-}; do
    IFS=: read -r cell_models dtype <<< "$cell"
    name="same-process-$dtype-b1-${cell_models//,/-}"
    timeout "${CELL_SECONDS:-300}" python3 experiments/python/same_process.py --models-json "$out/models.json" --out "$out/$name.json" --models "$cell_models" \
        --systems eager,compile,nimble --dtype "$dtype" --rounds 1 --checks "${CELL_CHECKS:-5}" --commit "$commit" > "$out/$name.table" 2> "$out/$name.log"
    cell_status=$?
    [ "$cell_status" = 0 ] || status=$cell_status
    { echo "== $cell (status $cell_status)"; cat "$out/$name.table"; grep -E "failed|Error" "$out/$name.log" | tail -5; } >> "$out/half.txt"
done
finish_packed half "$status"
