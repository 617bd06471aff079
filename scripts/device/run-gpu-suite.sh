#!/usr/bin/env bash
# Runs on the lent GPU machine (see README "GPU runs"): builds nothing, uses the binaries carried
# in .gpu/ (made by scripts/build-gpu-binaries.sh), writes everything under $OUT.
#   usage: scripts/device/run-gpu-suite.sh [full|holdout|quick]
set -uo pipefail
suite=${1:-full}
. "$(dirname "$0")/setup.sh"
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
