#!/usr/bin/env bash
# Provisions libtorch 2.11.0 (the CUDA 13.0 build, with the CUDA headers and the nvcc that
# nimble-torch's C++ shim and fused kernels compile with) in a cache directory outside the
# clone, and links it into the checkout as `.libtorch`, which .cargo/config.toml points LIBTORCH
# at. Safe to run again: a complete
# install is reused, a half-finished one is removed and redone. About 1 minute and 4.6 GB the
# first time.
#
#
# It also provisions the newest torch release the backend is tested with (NEWEST_TESTED_TORCH in
# nimble-py/python/nimble_rs/_version.py, the one place that names it) in a second cached venv,
# linked as `.nimble-venv-newest`, with the packages the Python tests need; scripts/test-python.sh
# runs the tests that need no engine there. About 1 minute and 5 GB more the first time.
#
#   NIMBLE_CACHE_DIR  where the install lives (default: $XDG_CACHE_HOME/nimble or ~/.cache/nimble)
#   PYTHON            the interpreter used to create the venv (default: python3, 3.10 to 3.13)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cache=${NIMBLE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/nimble}
venv=$cache/libtorch-2.11.0-cu130
python=${PYTHON:-python3}
# nvcc's compiler must come from the same CUDA as its assembler (nimble-torch compiles its fused
# kernels with it): cuda-toolkit 13.0.2 alone lets pip pick newer ones.
nvcc_pins="nvidia-nvvm==13.0.88 nvidia-cuda-crt==13.0.88"

if [ ! -f "$venv/.complete" ]; then
    echo "setup-libtorch: installing torch==2.11.0 into $venv (about 1 minute, 4.6 GB)" >&2
    rm -rf "$venv"
    mkdir -p "$cache"
    "$python" -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check \
        torch==2.11.0 "cuda-toolkit[cccl,nvcc]==13.0.2" $nvcc_pins
    "$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' > "$venv/.site"
    touch "$venv/.nvcc-pinned" "$venv/.complete"
fi
# Installs made before the pins: pip had taken nvcc's front end (nvvm) and headers (crt) from a
# newer CUDA, whose PTX the 13.0 assembler rejects, so the fused kernels would not compile.
if [ ! -f "$venv/.nvcc-pinned" ]; then
    echo "setup-libtorch: pinning nvcc's compiler to CUDA 13.0 in $venv" >&2
    "$venv/bin/pip" install --quiet --disable-pip-version-check $nvcc_pins
    touch "$venv/.nvcc-pinned"
fi
site=$(cat "$venv/.site")
for need in "$site/torch/lib/libtorch_cuda.so" "$site/nvidia/cu13/include/cuda_runtime_api.h" "$site/nvidia/cu13/bin/nvcc"; do
    if [ ! -e "$need" ]; then
        echo "setup-libtorch: $need is missing from the cached install; remove $venv and run again" >&2
        exit 1
    fi
done
# Replace the links atomically so a concurrent build never sees them missing. `.nimble-python` is
# `.nimble-venv` is the venv itself, with PyTorch 2.11.0: the tests make their TorchScript
# fixtures with its Python (.cargo/config.toml passes it on as NIMBLE_PYTHON).
ln -sfn "$site" "$repo/.libtorch.tmp"
mv -T "$repo/.libtorch.tmp" "$repo/.libtorch"
ln -sfn "$venv" "$repo/.nimble-venv.tmp"
mv -T "$repo/.nimble-venv.tmp" "$repo/.nimble-venv"
echo "setup-libtorch: libtorch 2.11.0 at $site/torch (linked as .libtorch), its venv as .nimble-venv" >&2

# The newest tested torch, for the backend's tests on it (no libtorch is linked against it).
newest=$(sed -n 's/^NEWEST_TESTED_TORCH = "\([0-9.]*\)"$/\1/p' "$repo/nimble-py/python/nimble_rs/_version.py")
if [ -z "$newest" ]; then
    echo "setup-libtorch: no NEWEST_TESTED_TORCH = \"X.Y.Z\" line in nimble-py/python/nimble_rs/_version.py" >&2
    exit 1
fi
newest_venv=$cache/torch-$newest
if [ ! -f "$newest_venv/.complete" ]; then
    echo "setup-libtorch: installing torch==$newest into $newest_venv (about 1 minute, 5 GB)" >&2
    rm -rf "$newest_venv"
    "$python" -m venv "$newest_venv"
    # The test runner and the tokenizer test's transformers, as in the engine's venv; no maturin
    # or Rust: nimble_rs comes to it as the wheel users install (scripts/test-python.sh).
    "$newest_venv/bin/pip" install --quiet --disable-pip-version-check \
        "torch==$newest" "pytest==8.4.2" "transformers==5.17.0"
    touch "$newest_venv/.complete"
fi
ln -sfn "$newest_venv" "$repo/.nimble-venv-newest.tmp"
mv -T "$repo/.nimble-venv-newest.tmp" "$repo/.nimble-venv-newest"
echo "setup-libtorch: torch $newest (the newest tested) in $newest_venv, linked as .nimble-venv-newest" >&2
