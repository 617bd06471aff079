#!/usr/bin/env bash
# Runs on the lent GPU machine (see README "GPU runs"): builds nothing, uses the binaries carried
# in .gpu/ (made by scripts/build-gpu-binaries.sh), writes everything under $OUT.
#   usage: scripts/device/run-gpu-suite.sh [full|holdout|quick]
set -uo pipefail
suite=${1:-full}
out=${OUT:-/tmp/nimble-out}
mkdir -p "$out"
torch=$(python3 -c "import torch,os;print(os.path.dirname(torch.__file__))")
export LD_LIBRARY_PATH="$torch/lib:$torch/../nvidia/cu13/lib:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv | tee "$out/nvidia-smi.csv"
status=0
for test in .gpu/tests/*; do
    echo "== $test"
    NIMBLE_REQUIRE_GPU=1 "$test" --test-threads=1 2>&1 | tee -a "$out/gpu-tests.log" || status=1
done
.gpu/nimble-bench synth --synthetic nasnet:4 --algo nimble --mode graph | tee "$out/synth.txt" || status=1
.gpu/nimble-bench synth --synthetic nasnet:4 --algo nimble --mode eager | tee -a "$out/synth.txt" || status=1
.gpu/nimble-bench validate-simulator --suite "$suite" --out "$out/simulator-$suite.json" 2>"$out/validate-progress.log" | tee "$out/validate.txt" || status=1
tail -3 "$out/validate-progress.log"
echo "gpu tests and validation finished with status $status"
exit $status
