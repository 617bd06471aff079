#!/usr/bin/env bash
# Runs on the lent GPU machine: `infer --model M` with two nimble-bench binaries, model by model
# in one run (the earlier commit's first; ORDER=after-first reverses that, to tell the order's
# effect from the change's), so that a change can be shown to leave the zoo's latency within
# noise. Builds nothing: .gpu/nimble-bench and .gpu/before/nimble-bench.
# Writes $OUT/inference-before.json, $OUT/inference-after.json (one record per binary, rows of
# every model) and a table of Nimble's latency side by side.
#   usage: scripts/device/run-before-after.sh [MODELS] [MODES]
set -uo pipefail
models=${1:-resnet50,resnet101,inception-v3,mobilenet-v2,efficientnet-b0,efficientnet-b5,nasnet-a-large,nasnet-a-mobile,darts,amoebanet}
modes=${2:-graph,nimble}
. "$(dirname "$0")/setup.sh"
mkdir -p "$out/parts"
status=0
for model in ${models//,/ }; do
    pair="before after"; [ "${ORDER:-}" = after-first ] && pair="after before"
    for which in $pair; do
        binary=.gpu/nimble-bench; [ $which = before ] && binary=.gpu/before/nimble-bench
        $binary infer --model "$model" --mode "$modes" --out "$out/parts/$which-$model.json" 2>/dev/null | tail -n 1 | sed "s/^/$which /" || status=1
    done
done
python3 - "$out" <<'PY'
import glob, json, os, sys
out = sys.argv[1]
for which in ("before", "after"):
    parts = sorted(glob.glob(f"{out}/parts/{which}-*.json"))
    records = [json.load(open(p)) for p in parts]
    merged = dict(records[0]); merged["rows"] = [r for rec in records for r in rec["rows"]]
    merged["commits"] = sorted({rec["provenance"]["commit"] for rec in records})
    json.dump(merged, open(f"{out}/inference-{which}.json", "w"), indent=1)
before = json.load(open(f"{out}/inference-before.json")); after = json.load(open(f"{out}/inference-after.json"))
print(f"before {before['commits']} after {after['commits']}, ms (median)")
key = lambda r: (r["model"], r["mode"])
b = {key(r): r["latency"]["median_us"] / 1000 for r in before["rows"]}
for r in after["rows"]:
    k = key(r); print(f"{k[0]:<16} {k[1]:<7} {b.get(k, float('nan')):8.3f} {r['latency']['median_us']/1000:8.3f} {r['latency']['median_us']/1000/b.get(k, float('nan')):6.3f}")
PY
rm -rf "$out/parts"
echo "== finished with status $status"
exit $status
