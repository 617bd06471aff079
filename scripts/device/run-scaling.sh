#!/usr/bin/env bash
# Runs on a lent multi-GPU machine: nimble-torch's data-parallel GPU test (2 ranks against one
# GPU on the whole batch), then the scaling measurement (`nimble-bench train --gpus`: Nimble's
# whole step on 1 and N GPUs, and the one-GPU forward graphs the simulator projects from), the all-reduce calibration (`allreduce --gpus N`) and PyTorch DDP
# (eager and captured) in the same call. Builds
# nothing: uses the binaries carried in .gpu/ (scripts/build-gpu-binaries.sh). Everything lands
# under $OUT; the tables are printed last.
#   usage: scripts/device/run-scaling.sh [tests|nimble|ddp|allreduce|all] [MODELS] [BATCHES] [GPUS] [WARMUP] [ITERS] [TRAIN ARGS...]
#   DDP_SYSTEMS=ddp-eager,ddp-compile,ddp-backend picks PyTorch DDP's systems (experiments/python/ddp.py; default
#   ddp-eager,ddp-graph); with ddp-backend the carried nimble_rs wheels are installed first, and DDP_TESTS=1 runs the
#   backend's DDP test (nimble-py/tests/test_backend_ddp.py, NIMBLE_REQUIRE_GPU=1) on the machine's GPUs before it.
#   DDP_ARGS="--no-optimize-ddp" passes its options to ddp.py (there: DDP's whole model compiled as one graph).
set -uo pipefail
what=${1:-all}
models=${2:-resnet50,mobilenet-v2}
batches=${3:-32,64,128}
gpus=${4:-1,2}
warmup=${5:-50}
iters=${6:-100}
shift $(( $# < 6 ? $# : 6 ))
tag=${TAG:-}
. "$(dirname "$0")/setup.sh"
nvidia-smi topo -m > "$out/topology.txt" 2>&1
status=0
if [ "$what" = tests ] || [ "$what" = all ]; then
    NIMBLE_REQUIRE_MULTI_GPU=1 timeout 400 .gpu/tests/nimble-torch-data_parallel_gpu --nocapture > "$out/data-parallel-tests.log" 2>&1 || status=1
    grep -E "^test |test result|data parallel over|panicked|rror" "$out/data-parallel-tests.log" | cut -c1-400
fi
if [ "$what" = nimble ] || [ "$what" = all ]; then
    .gpu/nimble-bench train --gpus "$gpus" --model "$models" --batch "$batches" --warmup "$warmup" --iters "$iters" --out "$out/scaling$tag.json" --graphs "$out/graphs$tag" "$@" \
        > "$out/scaling$tag.txt" 2> "$out/scaling$tag-progress.log" || status=1
    grep -vE "^\s*$" "$out/scaling$tag-progress.log" | cut -c1-300 | tail -30
fi
if [ "$what" = allreduce ] || [ "$what" = all ]; then
    for n in ${gpus//,/ }; do
        [ "$n" -ge 2 ] || continue
        .gpu/nimble-bench allreduce --gpus "$n" --out "$out/allreduce-$n.json" > "$out/allreduce-$n.txt" 2>&1 || status=1
        cat "$out/allreduce-$n.txt"
    done
fi
if [ "$what" = ddp ] || [ "$what" = all ]; then
    ddp_systems=${DDP_SYSTEMS:-ddp-eager,ddp-graph}
    case ",$ddp_systems,${DDP_TESTS:-0}" in *,ddp-backend,*|*,1) install_nimble_rs ;; esac
    if [ "${DDP_TESTS:-0}" = 1 ]; then
        NIMBLE_REQUIRE_GPU=1 timeout 300 python3 -m pytest -q -s -p no:cacheprovider nimble-py/tests/test_backend_ddp.py > "$out/ddp-tests.log" 2>&1 || status=1
        tail -5 "$out/ddp-tests.log"
    fi
    python3 experiments/python/ddp.py --out "$out/pytorch-ddp.json" --models "$models" --batches "$batches" --gpus "$gpus" --systems "$ddp_systems" ${DDP_ARGS:-} \
        --warmup "$warmup" --iters "$iters" --commit "$(cat .gpu/COMMIT)" > "$out/ddp.txt" 2> "$out/ddp-progress.log" || status=1
    grep -vE "^\s*$" "$out/ddp-progress.log" | cut -c1-300 | tail -30
fi
[ -s "$out/scaling$tag.txt" ] && cat "$out/scaling$tag.txt"
[ -s "$out/ddp.txt" ] && cat "$out/ddp.txt"
echo "== finished with status $status"
exit $status
