#!/usr/bin/env bash
# Runs on the lent GPU machine: exports models that no Rust code of ours defines as TorchScript
# files (experiments/python/export_torchscript.py, this machine's PyTorch, transformers and
# torchvision), then measures each from the CLI the way a user would:
#   nimble-bench infer --torchscript FILE --input ... --optimize both
# (eager = the module op by op, torchscript = libtorch's TorchScript runtime, graph = one-stream
# CUDA graph, nimble), each prepared model checked against the module's own forward first.
# Builds nothing: uses .gpu/ (scripts/build-gpu-binaries.sh). Writes $OUT/torchscript-models.json
# (one record per model, with the exporter's manifest) and a table.
#   usage: scripts/device/run-torchscript-suite.sh [MODELS (comma-separated exporter names)]
set -uo pipefail
models=${1:-bert-base,gpt2,roberta-base,distilbert,vit-base,t5-encoder,vit_b_16,swin_t,shufflenet_v2_x1_0,googlenet}
. "$(dirname "$0")/setup.sh"
dir=${TMPDIR:-/tmp}/nimble-torchscript
rm -rf "$dir" "$out/records" && mkdir -p "$dir" "$out/records"
python3 experiments/python/export_torchscript.py "$dir" --only "$models" --device cuda 2>&1 | grep -v Warning | grep -E '^[a-z0-9_.-]+: ' | tee "$out/export.log"
status=0
for name in $(exported_models "$dir/manifest.json"); do
    inputs=$(model_inputs "$dir/manifest.json" "$name")
    echo "== $name $inputs"
    .gpu/nimble-bench infer --torchscript "$dir/$name.pt" $inputs --optimize both --out "$out/records/$name.json" 2>"$out/records/$name.progress.log" | tail -n +2 || { status=1; tail -3 "$out/records/$name.progress.log"; }
done
python3 - "$dir/manifest.json" "$out/records" "$out/torchscript-models.json" <<'PY'
import json, os, sys
manifest, records, target = sys.argv[1:]
m = json.load(open(manifest))
out = {"experiment": "torchscript-models", "exporter": {k: v for k, v in m.items() if k != "models"}, "models": []}
for e in m["models"]:
    e = dict(e); e.pop("traceback", None)
    path = os.path.join(records, e["name"] + ".json")
    if os.path.exists(path):
        e["record"] = json.load(open(path))
    else:
        log = os.path.join(records, e["name"] + ".progress.log")
        if "error" not in e and os.path.exists(log):
            e["error"] = [l for l in open(log).read().splitlines() if l.startswith("error")][-1:]
    out["models"].append(e)
json.dump(out, open(target, "w"), indent=1)
PY
rm -rf "$out/records"
echo "== finished with status $status"
exit $status
