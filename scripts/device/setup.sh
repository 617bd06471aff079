# Sourced by the scripts beside it, on the lent GPU machine: $out (from $OUT), the library path
# to that machine's libtorch (its Python's torch), and the GPU's description in $out.
# With PACK_RESULTS=1 the results go to a scratch directory and `pack_results` puts them in one
# $OUT/results.tgz at the end (the device tool brings back few files; RESULTS_NAME names the
# archive instead, for several packed scripts in one call).
if [ "${PACK_RESULTS:-0}" = 1 ]; then
    packed_out=${OUT:-/tmp/nimble-out}
    mkdir -p "$packed_out"
    OUT=$(mktemp -d)
fi
pack_results() {
    tar czf "$packed_out/${RESULTS_NAME:-results}.tgz" -C "$out" .
}
# Ends a packed run whose table is $out/NAME.txt: keeps the GPU's description beside it, packs,
# prints the table last and exits with STATUS.
finish_packed() {
    cp "$out/nvidia-smi.csv" "$out/$1.nvidia-smi.csv"
    pack_results
    echo "== finished with status $2"
    cat "$out/$1.txt"
    exit "$2"
}
out=${OUT:-/tmp/nimble-out}
mkdir -p "$out"
torch=$(python3 -c "import torch,os;print(os.path.dirname(torch.__file__))")
export LD_LIBRARY_PATH="$torch/lib:$torch/../nvidia/cu13/lib:$torch/../nvidia/nccl/lib:${LD_LIBRARY_PATH:-}"
# NVLink multicast (NVLS) stays off on the lent multi-GPU machines.
export NCCL_NVLS_ENABLE=0
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv | tee "$out/nvidia-smi.csv"
# The tests that make TorchScript fixtures run this machine's Python (PyTorch 2.11.0).
export NIMBLE_PYTHON=${NIMBLE_PYTHON:-$(command -v python3)}
# Installs the Python package and pytest from the wheels in .gpu/wheels into a scratch directory
# on PYTHONPATH (scripts/build-gpu-binaries.sh builds them; nothing is fetched here).
install_nimble_rs() {
    local site=${TMPDIR:-/tmp}/nimble-python
    rm -rf "$site"
    python3 -m pip install --quiet --no-index --no-deps --target "$site" .gpu/wheels/*.whl 2>&1 | tail -3
    export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
    python3 -c "import sys, torch, nimble_rs; print('python', sys.version.split()[0], 'torch', torch.__version__, 'nimble_rs from', nimble_rs.__file__)"
}
# The models an exporter manifest (experiments/python/export_torchscript.py) holds without an
# error, and one model's `--input` flags for `nimble-bench infer --torchscript`.
exported_models() {
    python3 -c "import json,sys;print(' '.join(e['name'] for e in json.load(open(sys.argv[1]))['models'] if 'error' not in e))" "$1"
}
model_inputs() {
    python3 -c "import json,sys;print(' '.join('--input '+s for e in json.load(open(sys.argv[1]))['models'] if e['name']==sys.argv[2] for s in e['inputs']))" "$1" "$2"
}
