#!/usr/bin/env bash
# Runs on the lent GPU machine: where the rewrites freeze a model (nimble-torch's
# PrepareOptions::freeze_on_host), model by model in one run. Exports the models named
# (experiments/python/export_torchscript.py, traced on the GPU), then runs
# `infer --torchscript FILE --mode nimble --optimize on --freeze-on-host V` for each V given
# (true: on a CPU copy, the default; false: on the GPU), each in its own process, and prints a
# table: status, prepare seconds, where it was frozen, Nimble's latency and the check's error.
# Builds nothing: uses .gpu/ (scripts/build-gpu-binaries.sh).
# Writes $OUT/freeze-PART.json (every record, by model and variant) and $OUT/freeze-PART.txt.
#   usage: scripts/device/run-freeze-ab.sh PART MODELS [VARIANTS (default true,false)] [SECONDS (default 540)]
set -uo pipefail
part=${1:?usage: run-freeze-ab.sh PART MODELS [VARIANTS] [SECONDS]}
models=${2:?usage: run-freeze-ab.sh PART MODELS [VARIANTS] [SECONDS]}
variants=${3:-true,false}
budget=${4:-540}
started=$(date +%s)
. "$(dirname "$0")/setup.sh"
dir=${TMPDIR:-/tmp}/nimble-freeze-$part
rm -rf "$dir" "$out/parts-$part" && mkdir -p "$dir" "$out/parts-$part"
python3 experiments/python/export_torchscript.py "$dir" --only "$models" --device cuda 2>&1 | grep -E '^[a-z0-9_.-]+: ' > "$out/export-$part.log"
echo "== export took $(($(date +%s) - started)) s"
for name in $(exported_models "$dir/manifest.json"); do
    inputs=$(model_inputs "$dir/manifest.json" "$name")
    for v in ${variants//,/ }; do
        left=$((budget - ($(date +%s) - started)))
        [ "$left" -gt 5 ] || { echo "== out of time before $name ($v)"; break 2; }
        timeout "$left" .gpu/nimble-bench infer --torchscript "$dir/$name.pt" $inputs --mode nimble --optimize on --freeze-on-host "$v" \
            --out "$out/parts-$part/$name.$v.json" > "$out/parts-$part/$name.$v.log" 2>&1 || tail -2 "$out/parts-$part/$name.$v.log"
    done
done
python3 - "$out" "$part" "$dir/manifest.json" <<'PY' | tee "$out/freeze-$part.txt"
import glob, json, os, sys
out, part, manifest = sys.argv[1:]
records, lines = {}, []
names = [e["name"] for e in json.load(open(manifest))["models"]]
first = sorted(glob.glob(f"{out}/parts-{part}/*.json"))
if first:
    p = json.load(open(first[0]))["provenance"]
    print(f"{p['gpu']} (driver {p['driver_version']}), commit {p['commit'][:7]}, {p['date_utc']}; infer --mode nimble --optimize on, one process per model and variant")
print(f"{'model':<26} {'freeze_on_host':<14} {'status':<7} {'prepare s':>9} {'frozen on':>9} {'nimble ms':>9} {'rel.err':>8}")
for name in names:
    for path in sorted(glob.glob(f"{out}/parts-{part}/{name}.*.json")) or [None]:
        if path is None:
            log = sorted(glob.glob(f"{out}/parts-{part}/{name}.*.log"))
            why = open(log[0]).read().strip().splitlines()[-1][:90] if log else "not run"
            print(f"{name:<26} {'':<14} failed  {why}")
            continue
        variant = path.rsplit(".", 2)[1]
        record = json.load(open(path))
        records[f"{name}.{variant}"] = record
        row = record["rows"][0]
        p = row["prepare"]
        print(f"{name:<26} {variant:<14} {'ok':<7} {p['seconds']['total']:>9.2f} {'host' if p['frozen_on_host'] else 'GPU':>9} {row['latency']['median_us'] / 1000:>9.3f} {row['relative_error']:>8.1e}")
    for path in sorted(glob.glob(f"{out}/parts-{part}/{name}.*.log")):
        variant = path.rsplit(".", 2)[1]
        if f"{name}.{variant}" not in records and glob.glob(f"{out}/parts-{part}/{name}.*.json"):
            print(f"{name:<26} {variant:<14} failed  {open(path).read().strip().splitlines()[-1][:90]}")
json.dump({"experiment": "freeze-on-host", "part": part, "records": records}, open(f"{out}/freeze-{part}.json", "w"), indent=1)
PY
cp "$out/nvidia-smi.csv" "$out/freeze-$part.nvidia-smi.csv"
rm -rf "$dir" "$out/parts-$part"
echo "== part $part finished after $(($(date +%s) - started)) s"
