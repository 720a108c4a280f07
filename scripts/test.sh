#!/usr/bin/env bash
# The whole test suite: native unit and integration tests (ctest), then the
# WebAssembly build of the nn core checked against the native one under node.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
jobs=$(nproc)
cmake --preset release -DDNNLAB_BUILD_BENCH=OFF >/dev/null
cmake --build --preset release -j "$jobs"
ctest --preset release -j "$jobs" --timeout 600
tests/wasm/run.sh
