#!/usr/bin/env bash
# Builds what bench/js/run.mjs measures (the wasm core, the native
# train_bench, the npm packages from package-lock.json) and runs it.
#   bench/js/run.sh                 # 5 rounds x 3 s
#   ROUNDS=3 SECS=2 bench/js/run.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
export NODE_PATH=/usr/share/nodejs   # Debian's emscripten finds acorn there
wasm=${WASM_BUILD:-$root/build/wasm-api}
native=${NATIVE_BUILD:-$root/build/bench}
cmake -S "$root" -B "$wasm" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_TOOLCHAIN_FILE=/usr/share/emscripten/cmake/Modules/Platform/Emscripten.cmake >/dev/null
ninja -C "$wasm" -j2 dnnlab_core >/dev/null
if [ ! -f "$native/build.ninja" ]; then
  cmake -S "$root" -B "$native" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDNNLAB_BUILD_TESTS=OFF \
    -DDNNLAB_SKIP_MODULES="sweep;queue;store;worker;server" >/dev/null
fi
ninja -C "$native" -j2 train_bench >/dev/null
[ -d "$here/node_modules" ] || (cd "$here" && npm ci --no-audit --no-fund)
DNNLAB_CORE_DIR="$wasm/src/wasm" NATIVE="$native/bench/train_bench" \
  node --no-experimental-fetch "$here/run.mjs" "$@"
