#!/usr/bin/env bash
# The whole test suite, all under ctest: unit tests per module, end-to-end
# CLI runs with real worker processes, the HTTP server, the dashboard in
# headless Chromium, and the WebAssembly core against the native one; then
# the native suites again under ASan + UBSan, and the fuzz targets.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
jobs=$(nproc)
cmake --preset release -DDNNLAB_BUILD_BENCH=OFF >/dev/null
cmake --build --preset release -j "$jobs"
ctest --preset release -j "$jobs" --timeout 900
# The same suites (all but the wasm and browser ones) under ASan + UBSan, built
# with clang, and each libFuzzer target for a short run (label fuzz).
cmake --preset asan >/dev/null
cmake --build --preset asan -j "$jobs"
ctest --preset asan -j "$jobs" --timeout 900
