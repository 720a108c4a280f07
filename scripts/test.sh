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
# The ASan + UBSan build (clang) runs while the release suite does, at the
# lowest priority: it takes the CPU the suite leaves idle while it waits on
# its servers, browsers and child processes (about a third of two cores), so
# it yields to every test. Its output goes to build/asan-build.log.
cmake --preset asan >/dev/null
mkdir -p build
set -m  # the build in its own process group, so that an early exit stops all of it
nice -n 19 cmake --build --preset asan -j "$jobs" >build/asan-build.log 2>&1 &
asan_build=$!
set +m
trap 'kill -- -$asan_build 2>/dev/null || true' EXIT
ctest --preset release -j "$jobs" --timeout 900
echo "waiting for the ASan + UBSan build (build/asan-build.log) ..."
if ! wait "$asan_build"; then
  tail -n 100 build/asan-build.log
  echo "the ASan + UBSan build failed" >&2
  exit 1
fi
trap - EXIT
tail -n 2 build/asan-build.log
# The same suites (all but the wasm and browser ones) under ASan + UBSan, and
# each libFuzzer target for a short run (label fuzz).
ctest --preset asan -j "$jobs" --timeout 900
