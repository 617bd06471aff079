#!/usr/bin/env bash
# Runs on the lent GPU machine: the Python package's tests (nimble-py/tests, the GPU ones
# required) with that machine's own Python and torch 2.11.0. Builds nothing: installs the
# wheel and pytest's wheels carried in .gpu/wheels (scripts/build-gpu-binaries.sh) into a
# scratch directory. Everything lands under $OUT.
#   usage: scripts/device/run-python-suite.sh
set -uo pipefail
. "$(dirname "$0")/setup.sh"
install_nimble_rs
NIMBLE_REQUIRE_GPU=1 python3 -m pytest -q -s -p no:cacheprovider nimble-py/tests 2>&1 | tee "$out/python-tests.log" | tail -30
status=${PIPESTATUS[0]}
echo "== python tests finished with status $status"
exit "$status"
