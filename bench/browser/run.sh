#!/usr/bin/env bash
# The browser-core benchmark of issue 5 in headless Chromium (bench/browser):
# builds the wasm core (build/wasm-bench) and the native train_bench and
# cnn_bench (build/bench-browser), installs the npm packages from
# package-lock.json, then runs run.mjs and prints the table for bench/RESULTS.md.
#   bench/browser/run.sh                    # 5 rounds x 3 s per measurement
#   ROUNDS=3 SECS=2 bench/browser/run.sh
#   CONFIGS=q NODE=1 bench/browser/run.sh   # issue 14's CNN (CIFAR-10-quick), Chromium and node
#   NODE=1 bench/browser/run.sh             # also the same workloads under node
#   LOG=old.log bench/browser/run.sh report # tables from an earlier log only
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
wasm=${WASM_BUILD:-$root/build/wasm-bench}
native=${NATIVE_BUILD:-$root/build/bench-browser}
if [ "${1:-}" != report ]; then
  export NODE_PATH=/usr/share/nodejs   # Debian's emscripten finds acorn there
  log=$(mktemp)
  trap 'rm -f "$log"' EXIT
  quiet() { "$@" >"$log" 2>&1 || { cat "$log" >&2; exit 1; }; }  # the build's output only if it fails
  quiet cmake -S "$root" -B "$wasm" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_TOOLCHAIN_FILE=/usr/share/emscripten/cmake/Modules/Platform/Emscripten.cmake
  quiet ninja -C "$wasm" -j2 dnnlab_core dnnlab_core_relaxed
  if [ ! -f "$native/build.ninja" ]; then
    quiet cmake -S "$root" -B "$native" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDNNLAB_BUILD_TESTS=OFF \
      -DDNNLAB_SKIP_MODULES="sweep;queue;store;worker;server"
  fi
  quiet ninja -C "$native" -j2 train_bench cnn_bench
  # npm ci again whenever the lock file changed since the last install.
  if [ ! -f "$here/node_modules/.package-lock.json" ] ||
     [ "$here/package-lock.json" -nt "$here/node_modules/.package-lock.json" ]; then
    (cd "$here" && npm ci --no-audit --no-fund)
  fi
fi
DNNLAB_CORE_DIR="$wasm/src/wasm" NATIVE="$native/bench/train_bench" node "$here/run.mjs" "$@"
