#!/usr/bin/env bash
# Runs on the lent GPU machine: exports TorchScript models (experiments/python/export_torchscript.py,
# this machine's PyTorch) and runs `infer --torchscript --mode graph,nimble` on each once per
# variant of the inference rewrites, so that which rewrite helps or hurts a model shows in one
# run. Builds nothing: uses .gpu/nimble-bench. Each run's record lands in
# $OUT/rewrites/MODEL-LABEL.json; everything is packed into $OUT/results.tgz (or
# $OUT/$RESULTS_NAME.tgz) and a table (Nimble's median ms, per model and variant) is printed last.
#   usage: scripts/device/run-rewrite-variants.sh MODELS 'LABEL|ARGS'...
#   e.g.   ... alexnet,regnet_x_1_6gf 'raw|--optimize off' 'default|' 'no-cudnn-fusion|--fuse false'
set -uo pipefail
[ $# -ge 2 ] || { echo "usage: $0 MODELS 'LABEL|ARGS'..." >&2; exit 2; }
models=$1
shift
PACK_RESULTS=1
. "$(dirname "$0")/setup.sh"
dir=${TMPDIR:-/tmp}/nimble-torchscript
rm -rf "$dir" && mkdir -p "$dir" "$out/rewrites"
python3 experiments/python/export_torchscript.py "$dir" --only "$models" --device cuda 2>&1 | grep -E '^[a-z0-9_.-]+: '
cp "$dir/manifest.json" "$out/rewrites/manifest.json"
status=0
labels=()
for variant in "$@"; do labels+=("${variant%%|*}"); done
for name in $(exported_models "$dir/manifest.json"); do
    inputs=$(model_inputs "$dir/manifest.json" "$name")
    for variant in "$@"; do
        IFS='|' read -r label args <<< "$variant"
        # shellcheck disable=SC2086 # the variant's flags are words on purpose
        .gpu/nimble-bench infer --torchscript "$dir/$name.pt" $inputs --mode graph,nimble $args --out "$out/rewrites/$name-$label.json" \
            > "$out/rewrites/$name-$label.txt" 2> "$out/rewrites/$name-$label.log" || { status=1; echo "$name $label:"; tail -3 "$out/rewrites/$name-$label.log"; }
    done
done
python3 - "$out" "${labels[@]}" > "$out/rewrites.txt" <<'PY'
import glob, json, os, sys
out, labels = sys.argv[1], sys.argv[2:]
records = {}
for path in sorted(glob.glob(f"{out}/rewrites/*.json")):
    if path.endswith("manifest.json"):
        continue
    stem = os.path.basename(path)[:-5]
    label = next((l for l in labels if stem.endswith("-" + l)), None)
    if label is not None:
        records.setdefault(stem[: -len(label) - 1], {})[label] = json.load(open(path))
def cell(record, mode):
    row = next((r for r in record["rows"] if r["mode"] == mode), None)
    return row["latency"]["median_us"] / 1000 if row else float("nan")
first = next(iter(next(iter(records.values())).values()), None) if records else None
if first:
    p = first["provenance"]
    print(f"{p['gpu']} (driver {p['driver_version']}), commit {p['commit'][:7]}, {p['date_utc']}; Nimble's median ms (one-stream graph's in brackets)")
print(f"{'model':<20}" + "".join(f"{l:>22}" for l in labels))
for name, by_label in records.items():
    print(f"{name:<20}" + "".join(f"{cell(by_label[l], 'nimble'):>10.3f} ({cell(by_label[l], 'graph'):7.3f})  " if l in by_label else f"{'-':>22}" for l in labels))
PY
cp "$out/rewrites.txt" "$out/rewrites-table.txt"
finish_packed rewrites "$status"
