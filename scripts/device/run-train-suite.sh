#!/usr/bin/env bash
# Runs on the lent GPU machine: nimble-torch's training GPU tests (autograd mode and whole step
# against eager tch training, BatchNorm and dropout on replay, the errors, the data-parallel
# reducer as a group of one rank), then the training
# comparison (eager / whole-step graph / Nimble autograd mode / whole step on Nimble's streams)
# on the CIFAR-10 models. Builds nothing: uses the binaries carried in .gpu/
# (scripts/build-gpu-binaries.sh). Everything lands under $OUT.
#   usage: scripts/device/run-train-suite.sh [tests|bench|all] [MODELS] [BATCHES] [EXTRA train ARGS...]
set -uo pipefail
what=${1:-all}
models=${2:-all}
batches=${3:-32,64,128}
shift $(( $# < 3 ? $# : 3 ))
. "$(dirname "$0")/setup.sh"
status=0
if [ "$what" != bench ]; then
    NIMBLE_REQUIRE_GPU=1 .gpu/tests/nimble-torch-training_gpu --test-threads=1 --nocapture > "$out/training-gpu-tests.log" 2>&1 || status=1
    # The data-parallel reducer in a group of one rank (one GPU is enough).
    NIMBLE_REQUIRE_GPU=1 .gpu/tests/nimble-torch-data_parallel_gpu --exact a_group_of_one_rank_trains_like_the_step_alone --nocapture >> "$out/training-gpu-tests.log" 2>&1 || status=1
    grep -E "^test |test result|after [0-9]+ steps|replays|one rank|panicked|error" "$out/training-gpu-tests.log" | cut -c1-400
fi
if [ "$what" != tests ]; then
    .gpu/nimble-bench train --model "$models" --batch "$batches" --out "$out/training.json" "$@" 2>"$out/train-progress.log" > "$out/train.txt" || status=1
    cut -c1-300 "$out/train-progress.log"
    cat "$out/train.txt"
fi
echo "== finished with status $status"
exit $status
