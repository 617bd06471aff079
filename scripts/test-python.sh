#!/usr/bin/env bash
# Builds the Python package nimble_rs and its libtorch engine (nimble-py/ and nimble-py/engine/,
# maturin) into the cached torch 2.11.0 venv
# that scripts/setup-libtorch.sh makes (linked as .nimble-venv), then runs its pytest suite; then
# again, without the engine, on the newest tested torch (.nimble-venv-newest) from the wheel.
# pytest's "no tests ran" (exit 5) fails like a failing test. Run setup-libtorch.sh first.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
venv="$repo/.nimble-venv"
if [ ! -x "$venv/bin/python3" ]; then
    echo "test-python: $venv is missing; run scripts/setup-libtorch.sh first" >&2
    exit 1
fi
# maturin and pytest live in the cached venv too, so later runs skip this.
if [ ! -x "$venv/bin/maturin" ] || [ ! -x "$venv/bin/pytest" ]; then
    "$venv/bin/pip" install --quiet --disable-pip-version-check "maturin==1.9.6" "pytest==8.4.2"
fi
# transformers for the backend's tokenizer test, torchvision for the exporter's families (the
# lent GPU machine's versions; torchvision without its dependencies: torch is the venv's own).
if ! "$venv/bin/python3" -c "import transformers" 2>/dev/null; then
    "$venv/bin/pip" install --quiet --disable-pip-version-check "transformers==5.17.0"
fi
if ! "$venv/bin/python3" -c "import torchvision" 2>/dev/null; then
    # Its one dependency besides torch and numpy (transformers brings numpy): `import
    # torchvision` fails without it, as on a fresh machine (a venv that had it by chance hid that).
    "$venv/bin/pip" install --quiet --disable-pip-version-check --no-deps "torchvision==0.26.0" "pillow==13.0.0"
fi
cd "$repo"
# From the repo root, so that .cargo/config.toml (LIBTORCH) applies to the build: the package
# with its scheduling extension (no libtorch), then the libtorch engine behind nimble_rs.Nimble.
for manifest in nimble-py/Cargo.toml nimble-py/engine/Cargo.toml; do
    VIRTUAL_ENV="$venv" PATH="$venv/bin:$PATH" maturin develop --locked --manifest-path "$manifest"
done
# Inductor's compiled code cached beside libtorch, outside the clone (and /tmp), unless the
# caller names another place: on the 2-core machine the suite took 1,066 s with an empty cache
# against 220-315 s with a warm one. Seeded once from Inductor's own default cache, if any.
if [ -z "${TORCHINDUCTOR_CACHE_DIR:-}" ]; then
    inductor_cache=${NIMBLE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/nimble}/torchinductor
    default_cache=/tmp/torchinductor_$(id -un)
    if [ ! -d "$inductor_cache" ] && [ -d "$default_cache" ]; then
        rm -rf "$inductor_cache.partial"
        cp -a "$default_cache" "$inductor_cache.partial" && mv "$inductor_cache.partial" "$inductor_cache"
    fi
    export TORCHINDUCTOR_CACHE_DIR=$inductor_cache
fi
# NIMBLE_TEST_TORCH=engine or =newest runs one of the two suites below (default: both).
suites=${NIMBLE_TEST_TORCH:-both}
case "$suites" in engine|newest|both) ;; *) echo "test-python: NIMBLE_TEST_TORCH=$suites: expected engine, newest or both" >&2; exit 2 ;; esac

# The engine's venv: every test, the engine's included (a missing engine fails them).
if [ "$suites" != newest ]; then
    NIMBLE_REQUIRE_ENGINE=1 "$venv/bin/python3" -m pytest -q nimble-py/tests "$@"
fi
[ "$suites" != engine ] || exit 0

# The newest tested torch (NEWEST_TESTED_TORCH, set up by setup-libtorch.sh as
# .nimble-venv-newest), with nimble_rs as users install it: the abi3 wheel maturin builds here,
# installed into a fresh venv with no Rust toolchain on its PATH, which sees the cached venv's
# torch, pytest, transformers and pip through a .pth file (nothing is copied; nimble_rs is the
# wheel's alone). The inference example, then the tests that need no engine (the engine's are
# skipped with a notice: it is built for torch 2.11.0 only).
newest="$repo/.nimble-venv-newest"
if [ ! -x "$newest/bin/python3" ]; then
    echo "test-python: $newest is missing; run scripts/setup-libtorch.sh first" >&2
    exit 1
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
VIRTUAL_ENV="$venv" PATH="$venv/bin:$PATH" maturin build --release --locked --manifest-path nimble-py/Cargo.toml --out "$work/wheels"
python_bin=$(readlink -f "$newest/bin/python3")
# (Without pip and setuptools of its own: the cached venv's serve, which torch requires.)
"$python_bin" -m venv --without-pip "$work/fresh"
fresh_site=$("$work/fresh/bin/python3" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
"$newest/bin/python3" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' > "$fresh_site/nimble-newest-torch.pth"
# PATH without any directory that holds cargo or rustc.
bare_path="$work/fresh/bin"
IFS=: read -ra entries <<< "$PATH"
for entry in "${entries[@]}"; do
    if [ -n "$entry" ] && [ ! -e "$entry/cargo" ] && [ ! -e "$entry/rustc" ] && [ "$entry" != "$venv/bin" ]; then
        bare_path="$bare_path:$entry"
    fi
done
fresh() { env -u VIRTUAL_ENV -u CARGO_HOME -u RUSTUP_HOME PATH="$bare_path" "$@"; }
if fresh sh -c 'command -v cargo || command -v rustc' >/dev/null; then
    echo "test-python: a Rust toolchain is still on the fresh venv's PATH ($bare_path)" >&2
    exit 1
fi
fresh "$work/fresh/bin/python3" -m pip install --quiet --disable-pip-version-check --no-index --find-links "$work/wheels" nimble-rs
echo "test-python: nimble_rs installed from $(basename "$work"/wheels/*.whl) beside torch $("$work/fresh/bin/python3" -c 'import torch; print(torch.__version__)'), no Rust on PATH"
# Inductor's cache for this torch beside the other one (unless the caller named a place).
if [ -n "${inductor_cache:-}" ]; then
    export TORCHINDUCTOR_CACHE_DIR=$inductor_cache-newest
fi
fresh "$work/fresh/bin/python3" nimble-py/examples/inference.py
fresh "$work/fresh/bin/python3" -m pytest -q -p no:cacheprovider nimble-py/tests "$@"
