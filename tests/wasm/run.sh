#!/usr/bin/env bash
# Builds the nn core with em++ (wasm SIMD128), runs steps_main under node and
# compares it with the native build given as $1.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
native=${1:?usage: run.sh NATIVE_STEPS_BINARY}
export NODE_PATH=/usr/share/nodejs   # Debian's emscripten finds acorn there
build="${DNNLAB_WASM_BUILD:-$root/build/wasm}"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_TOOLCHAIN_FILE=/usr/share/emscripten/cmake/Modules/Platform/Emscripten.cmake >/dev/null
cmake --build "$build" --target nn_steps
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$native" >"$tmp/native.json"
# Node 20 needs --no-experimental-fetch for emscripten 3.1.6's loader.
node --no-experimental-fetch "$build/src/wasm/nn_steps.js" >"$tmp/wasm.json"
node "$here/compare.mjs" "$tmp/native.json" "$tmp/wasm.json"
