#!/usr/bin/env bash
# Runs on the lent GPU machine: torch.compile(backend="nimble") — the Python package's tests
# (the backend's GPU tests required) and then the same-process comparison
# (experiments/python/same_process.py) of eager, reduce-overhead, nimble_rs.Nimble and the
# backend, for each "MODELS:DTYPE:BATCH" cell given. Builds nothing (.gpu/,
# scripts/build-gpu-binaries.sh). Results are packed into $OUT/backend.tgz, the table printed last.
#   usage: scripts/device/run-backend.sh SECONDS_PER_CELL CELL...   e.g. 200 inception-v3,googlenet:float32:1 llama:bfloat16:1
#   TESTS_SECONDS=0 skips the tests (PYTEST_ARGS picks them; a test past 120 s dumps its stack); OVERHEAD_MODEL="llama inception-v3:16" first profiles a call's host time (model:batch, batch 1 by default)
#   (experiments/python/backend_overhead.py); COMPILE_PROFILE_MODEL="inception-v3 bert-base:16" the compile
#   time's phases, model:batch or model:batch:dtype, the latter built as the same-process records build it (experiments/python/backend_compile_profile.py; COMPILE_PROFILE_OPTIONS='{"depthwise_kernels":true}' the backend's options, COMPILE_PROFILE_SECONDS each model's limit, default 300, COMPILE_PROFILE_CPROFILE=0 without its second, profiled compile); KERNEL_GRAPHS="inception-v3:float32
#   llama,qwen2:bfloat16:16" writes the fused-kernel graphs of those models, at the batch given (default 1;
#   experiments/python/kernel_graphs.py) into kernel-graphs/, each group within KERNEL_GRAPHS_SECONDS (default 250);
#   KERNEL_GRAPHS_TIMED=1 also times reduce-overhead on them (each graph's best schedule against it); KERNEL_GRAPHS_BACKEND=1 keeps
#   the backend's in-graph timings (one region, each plan) beside each graph. TRAINING="resnet50,mobilenet-v2,encoder:32,64" runs the training comparison
#   (experiments/python/training_backend.py) for those models and batches, one process per model
#   (training-backend-MODEL.json), each within TRAINING_SECONDS (default 400; measured on an H100:
#   ResNet-50 at three batches about 450 s, MobileNetV2 at batch 32 alone about 250 s).
#   ROUNDS=5 times each comparison in 5 rounds (default 3).
#   SYSTEMS=eager,compile,max-autotune,backend picks the systems (default eager,compile,nimble,backend);
#   COMPILE_SECONDS=120 bounds each compiler's preparation of a model (a model past it is that system's failed row); BACKEND_VARIANTS="crit={\"algorithm\":\"nimble-critical\"} ..."
#   adds a system backend-NAME per NAME=JSON (torch.compile(backend="nimble", options=JSON)), timed beside the others;
#   COMPILE_VARIANTS="pdl={\"triton.enable_pdl\":true}" a system compile-NAME: reduce-overhead with those Inductor settings.
#   PROBES="experiments/python/probes/concat_source_probe.py ..." first runs those scripts (python3, with their default arguments, within PROBES_SECONDS each, default 200) into probes.txt.
#   TRAINING_OVERHEAD=resnet50:32 first profiles a training step's host time against reduce-overhead
#   (experiments/python/training_overhead.py, within TRAINING_OVERHEAD_SECONDS, default 240).
set -uo pipefail
budget=${1:?seconds per cell}
shift
export PACK_RESULTS=1 RESULTS_NAME=backend
. "$(dirname "$0")/setup.sh"
install_nimble_rs
# What the image holds: every torch and Triton it has (a newer torch's CUDA wheel cannot travel).
{ python3 -m pip list 2>/dev/null | grep -iE "^(torch|triton|torchvision|transformers|timm) "
  find / -xdev -maxdepth 8 -path '*/site-packages/torch/version.py' 2>/dev/null | while read -r v; do echo "$v: $(grep -m1 "^__version__" "$v")"; done; } > "$out/image.txt"
for probe in ${PROBES:-}; do
    { echo "== $probe"; timeout "${PROBES_SECONDS:-200}" python3 "$probe"; echo "(status $?)"; } >> "$out/probes.txt" 2>&1
done
for overhead in ${OVERHEAD_MODEL:-}; do
    IFS=: read -r model batch <<< "$overhead"
    timeout 200 python3 experiments/python/backend_overhead.py --model "$model" --batch "${batch:-1}" >> "$out/overhead.txt" 2>&1
done
if [ -n "${TRAINING_OVERHEAD:-}" ]; then
    IFS=: read -r model batch <<< "$TRAINING_OVERHEAD"
    timeout "${TRAINING_OVERHEAD_SECONDS:-240}" python3 experiments/python/training_overhead.py --model "$model" --batch "${batch:-32}" > "$out/training-overhead.txt" 2>&1
fi
.gpu/nimble-bench models --json > "$out/models.json" || exit 1
for profiled in ${COMPILE_PROFILE_MODEL:-}; do
    IFS=: read -r model batch dtype <<< "$profiled"
    # (with a dtype, the model as the same-process records build it)
    timeout "${COMPILE_PROFILE_SECONDS:-300}" python3 experiments/python/backend_compile_profile.py --model "$model" --batch "${batch:-1}" --options "${COMPILE_PROFILE_OPTIONS:-{\}}" \
        ${dtype:+--models-json "$out/models.json" --dtype "$dtype"} $([ "${COMPILE_PROFILE_CPROFILE:-1}" = 0 ] && echo --no-cprofile) >> "$out/compile-profile.txt" 2>&1
done
for group in ${KERNEL_GRAPHS:-}; do
    IFS=: read -r models dtype batch <<< "$group"
    timeout "${KERNEL_GRAPHS_SECONDS:-250}" python3 experiments/python/kernel_graphs.py --models-json <(.gpu/nimble-bench models --json) --out-dir "$out/kernel-graphs" \
        --models "$models" --dtype "$dtype" --batch "${batch:-1}" ${KERNEL_GRAPHS_TIMED:+--time-reduce-overhead} ${KERNEL_GRAPHS_BACKEND:+--time-backend} --commit "$(cat .gpu/COMMIT 2>/dev/null || echo unknown)" >> "$out/kernel-graphs.txt" 2>&1
done
status=0
if [ "${TESTS_SECONDS:-300}" != 0 ]; then
    NIMBLE_REQUIRE_GPU=1 timeout "${TESTS_SECONDS:-300}" python3 -m pytest -q -p no:cacheprovider -o faulthandler_timeout=120 ${PYTEST_ARGS:-nimble-py/tests} 2>&1 | tee "$out/python-tests.log" | tail -15
    status=${PIPESTATUS[0]}
fi
training_models=()
if [ -n "${TRAINING:-}" ]; then
    IFS=: read -r models batches <<< "$TRAINING"
    IFS=, read -r -a training_models <<< "$models"
    for model in "${training_models[@]}"; do
        # One process per model, so that a model past its time keeps the others' rows.
        timeout "${TRAINING_SECONDS:-400}" python3 experiments/python/training_backend.py --out "$out/training-backend-$model.json" --models "$model" --batches "$batches" --rounds "${ROUNDS:-3}" \
            --commit "$(cat .gpu/COMMIT 2>/dev/null || echo unknown)" > "$out/training-backend-$model.table" 2> "$out/training-backend-$model.log"
        model_status=$?
        echo "$model_status" > "$out/training-backend-$model.status"
        [ "$model_status" = 0 ] || status=$model_status
    done
fi
: > "$out/backend.txt"
cells=0
for cell in "$@"; do
    cells=$((cells + 1))
    IFS=: read -r models dtype batch <<< "$cell"
    name="same-process-backend-$cells-$dtype-b$batch"
    variants=()
    for variant in ${BACKEND_VARIANTS:-}; do variants+=(--backend-variant "$variant"); done
    for variant in ${COMPILE_VARIANTS:-}; do variants+=(--compile-variant "$variant"); done
    timeout "$budget" python3 experiments/python/same_process.py --models-json "$out/models.json" --out "$out/$name.json" \
        --models "$models" --systems "${SYSTEMS:-eager,compile,nimble,backend}" ${variants[@]+"${variants[@]}"} --dtype "$dtype" --batch "$batch" --rounds "${ROUNDS:-3}" --compile-seconds "${COMPILE_SECONDS:-0}" \
        --commit "$(cat .gpu/COMMIT 2>/dev/null || echo unknown)" > "$out/$name.table" 2> "$out/$name.log"
    cell_status=$?
    [ "$cell_status" = 0 ] || status=$cell_status
    { echo "== $cell (status $cell_status)"; cat "$out/$name.table"; grep -E "failed|Error" "$out/$name.log" | tail -5; } >> "$out/backend.txt"
done
for model in ${training_models[@]+"${training_models[@]}"}; do
    { echo "== training $model (status $(cat "$out/training-backend-$model.status"))"; cat "$out/training-backend-$model.table"; grep -E "failed|Error" "$out/training-backend-$model.log" | tail -5; } >> "$out/backend.txt"
done
[ -f "$out/python-tests.log" ] && echo "python tests: $(tail -1 "$out/python-tests.log")" >> "$out/backend.txt"
[ -f "$out/compile-profile.txt" ] && grep -E "first 3 calls|calls .* s$|report:|depthwise_kernels:" "$out/compile-profile.txt" >> "$out/backend.txt"
[ -f "$out/kernel-graphs.txt" ] && grep -E "kernels|reduce-overhead|backend's graph|failed|Error" "$out/kernel-graphs.txt" >> "$out/backend.txt"
{ echo "== image"; cat "$out/image.txt"; } >> "$out/backend.txt"
[ -f "$out/training-overhead.txt" ] && grep -E "^== |host ms|report:" "$out/training-overhead.txt" >> "$out/backend.txt"
[ -f "$out/probes.txt" ] && grep -E "^== |^\(status" "$out/probes.txt" >> "$out/backend.txt"
[ -f "$out/overhead.txt" ] && grep -E "^== |call|entry|replay|accepts" "$out/overhead.txt" >> "$out/backend.txt"
finish_packed backend "$status"
