#!/usr/bin/env bash
# Runs on the lent GPU machine: exports TorchScript models (experiments/python/export_torchscript.py,
# this machine's PyTorch and transformers) and runs `infer --torchscript --mode nimble --optimize
# on` on each with two nimble-bench binaries, the earlier commit's (.gpu/before/nimble-bench)
# first, so that a rewrite's effect shows model by model in one run. Builds nothing.
# Writes $OUT/torchscript-before.json and $OUT/torchscript-after.json (the records of every model,
# by binary) and prints a table of Nimble's latency side by side.
# INFER_ARGS adds flags to both (e.g. --exact-check for deep networks with random weights).
#   usage: scripts/device/run-torchscript-before-after.sh [MODELS (comma-separated exporter names)]
set -uo pipefail
models=${1:-bert-base,gpt2,roberta-base,distilbert}
. "$(dirname "$0")/setup.sh"
dir=${TMPDIR:-/tmp}/nimble-torchscript
rm -rf "$dir" "$out/parts" && mkdir -p "$dir" "$out/parts"
python3 experiments/python/export_torchscript.py "$dir" --only "$models" --device cuda 2>&1 | grep -E '^[a-z0-9_.-]+: '
status=0
for name in $(exported_models "$dir/manifest.json"); do
    inputs=$(model_inputs "$dir/manifest.json" "$name")
    for which in before after; do
        binary=.gpu/nimble-bench; [ $which = before ] && binary=.gpu/before/nimble-bench
        $binary infer --torchscript "$dir/$name.pt" $inputs --mode nimble --optimize on ${INFER_ARGS:-} --out "$out/parts/$which-$name.json" \
            > /dev/null 2> "$out/parts/$which-$name.log" || { status=1; tail -3 "$out/parts/$which-$name.log"; }
    done
done
python3 - "$out" <<'PY'
import glob, json, os, sys
out = sys.argv[1]
merged = {}
for which in ("before", "after"):
    records = {os.path.basename(p)[len(which) + 1:-5]: json.load(open(p)) for p in sorted(glob.glob(f"{out}/parts/{which}-*.json"))}
    merged[which] = records
    json.dump({"experiment": "torchscript-before-after", "binary": which, "records": records}, open(f"{out}/torchscript-{which}.json", "w"), indent=1)
commit = lambda which: sorted({r["provenance"]["commit"][:7] for r in merged[which].values()})
print(f"Nimble with the rewrites, ms (median): before {commit('before')}, after {commit('after')}")
for name, after in merged["after"].items():
    a = after["rows"][0]["latency"]["median_us"] / 1000
    b = merged["before"].get(name, {}).get("rows", [{}])[0].get("latency", {}).get("median_us", float("nan")) / 1000
    print(f"{name:<16} {b:8.3f} {a:8.3f} {a / b:6.3f}")
PY
rm -rf "$out/parts"
echo "== finished with status $status"
exit $status
