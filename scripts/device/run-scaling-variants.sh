#!/usr/bin/env bash
# Runs on a lent GPU machine: `nimble-bench train --gpus` once per variant of the data-parallel
# step, in one call, one record each (scaling-LABEL.json), all packed into $OUT/results.tgz (or
# $OUT/$RESULTS_NAME.tgz); the variants' tables are printed last. Builds nothing: uses the
# binaries carried in .gpu/.
#   usage: scripts/device/run-scaling-variants.sh MODELS BATCHES GPUS WARMUP ITERS 'LABEL|ENV|ARGS'...
#   e.g.   ... resnet50 32,64,128 1,2 50 100 'default||' 'inplace||--pack-below-mb 0' 'efficient|NCCL_CTA_POLICY=1|'
# ENV: variables for that variant only (NAME=VALUE, space-separated); ARGS: more `train` flags,
# where @OUT@ stands for the results directory (e.g. '--profile @OUT@/traces-LABEL').
set -uo pipefail
[ $# -ge 6 ] || { echo "usage: $0 MODELS BATCHES GPUS WARMUP ITERS 'LABEL|ENV|ARGS'..." >&2; exit 2; }
models=$1 batches=$2 gpus=$3 warmup=$4 iters=$5
shift 5
PACK_RESULTS=1
. "$(dirname "$0")/setup.sh"
nvidia-smi topo -m > "$out/topology.txt" 2>&1
status=0
labels=()
for variant in "$@"; do
    IFS='|' read -r label envs args <<< "$variant"
    labels+=("$label")
    args=${args//@OUT@/$out}
    echo "== $label: environment ${envs:-(none)}, flags ${args:-(none)}"
    # shellcheck disable=SC2086 # the variant's variables and flags are words on purpose
    env $envs .gpu/nimble-bench train --gpus "$gpus" --model "$models" --batch "$batches" --warmup "$warmup" --iters "$iters" \
        --out "$out/scaling-$label.json" $args > "$out/scaling-$label.txt" 2> "$out/scaling-$label-progress.log" \
        || { status=1; tail -5 "$out/scaling-$label-progress.log"; }
done
for label in "${labels[@]}"; do
    echo "== $label"
    tail -n +2 "$out/scaling-$label.txt"
done > "$out/variants.txt"
finish_packed variants $status
