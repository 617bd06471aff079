#!/usr/bin/env bash
# Runs on the lent GPU machine: the same-process comparison (experiments/python/same_process.py:
# eager, torch.cuda.graph, torch.compile reduce-overhead and Nimble through nimble_rs, in one
# Python process) and then the Rust CLI on the very Inception-v3 module Nimble traced there
# (`nimble-bench infer --torchscript`), for the Python package against the CLI. Builds nothing
# (.gpu/, scripts/build-gpu-binaries.sh). Records land in $OUT: same-process.json,
# cli-inception-v3.json.
#   usage: scripts/device/run-same-process.sh [MODELS] [SECONDS]
set -uo pipefail
models=${1:-all}
budget=${2:-540}
. "$(dirname "$0")/setup.sh"
install_nimble_rs
dir=${TMPDIR:-/tmp}/nimble-same-process
rm -rf "$dir" && mkdir -p "$dir"
.gpu/nimble-bench models --json > "$out/models.json" || exit 1
save=()
case ",$models," in *,inception-v3,*|,all,) save=(--save-torchscript "inception-v3=$dir/inception-v3.pt") ;; esac
timeout "$budget" python3 experiments/python/same_process.py --models-json "$out/models.json" --out "$out/same-process.json" \
    --models "$models" --commit "$(cat .gpu/COMMIT 2>/dev/null || echo unknown)" "${save[@]}" 2>&1 | tee "$out/same-process.log"
status=${PIPESTATUS[0]}
if [ -f "$dir/inception-v3.pt" ]; then
    .gpu/nimble-bench infer --torchscript "$dir/inception-v3.pt" --input 1x3x299x299 --mode nimble --optimize on \
        --out "$out/cli-inception-v3.json" 2>&1 | tee "$out/cli-inception-v3.log" | tail -6
fi
rm -rf "$dir"
echo "== same-process comparison finished with status $status"
exit "$status"
