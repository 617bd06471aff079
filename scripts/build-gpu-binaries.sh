#!/usr/bin/env bash
# Builds, here, everything a GPU run needs, into .gpu/ (ignored; carried by the device tool):
# the release nimble-bench and the GPU test binaries, stripped.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup-libtorch.sh
rm -rf .gpu && mkdir -p .gpu/tests
cargo build --release --locked -p nimble-bench
cp target/release/nimble-bench .gpu/
for package in nimble-cuda nimble-torch; do
    tests="--test gpu"; [ "$package" = nimble-torch ] && tests="--test gpu --test gpu_torchscript --test linear_ops --test conv_relu --test training_gpu --test data_parallel_gpu"
    cargo test --release --locked -p "$package" $tests --no-run --message-format=json 2>/dev/null \
        | python3 -c 'import json,sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["test"]:
        print(m["executable"], m["target"]["name"])' \
        | while read -r executable name; do cp "$executable" ".gpu/tests/$package-$name"; done
done
strip .gpu/nimble-bench .gpu/tests/* 2>/dev/null || true
# The Python package and its libtorch engine as wheels (abi3: the GPU machine's Python 3.12 takes it), with pytest's
# wheels, for scripts/device/run-python-suite.sh; nothing is fetched there. No auditwheel repair:
# the extension must use the torch libraries of the Python that imports it, not bundled copies.
venv=.nimble-venv
if [ ! -x "$venv/bin/maturin" ]; then "$venv/bin/pip" install --quiet --disable-pip-version-check "maturin==1.9.6" "pytest==8.4.2"; fi
mkdir -p .gpu/wheels
for manifest in nimble-py/Cargo.toml nimble-py/engine/Cargo.toml; do
    VIRTUAL_ENV="$PWD/$venv" PATH="$PWD/$venv/bin:$PATH" maturin build --release --locked --auditwheel skip --manifest-path "$manifest" --out .gpu/wheels
done
"$venv/bin/pip" download --quiet --disable-pip-version-check --only-binary=:all: --python-version 3.12 --dest .gpu/wheels "pytest==8.4.2"
# The backend's optional cuDNN graph API (fuse_convolutions="epilogue"), without its own
# dependencies (its convolution graphs need none of them; the GPU machine's torch brings cuDNN).
"$venv/bin/pip" download --quiet --disable-pip-version-check --no-deps --only-binary=:all: --python-version 3.12 --platform manylinux_2_28_x86_64 --dest .gpu/wheels "nvidia-cudnn-frontend==1.32.0"
# The commit the binaries were built from, for records made by scripts (the Python baselines).
{ git rev-parse HEAD | tr -d '\n'; git diff --quiet HEAD 2>/dev/null || printf -- '-dirty'; echo; } > .gpu/COMMIT
ls -la .gpu .gpu/tests
