#!/usr/bin/env bash
# Builds the Python package nimble_rs and its libtorch engine (nimble-py/ and nimble-py/engine/,
# maturin) into the cached torch 2.11.0 venv
# that scripts/setup-libtorch.sh makes (linked as .nimble-venv), then runs its pytest suite.
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
"$venv/bin/python3" -m pytest -q nimble-py/tests "$@"
