#!/usr/bin/env bash
# Builds the wasm core (dnnlab_core + dnnlab.mjs) with em++ and runs
# api.test.mjs against it; $1 is the native build of the same C API.
#   tests/wasm/api_test.sh build/release/tests/wasm/api_native
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
export DNNLAB_API_NATIVE=$(realpath "${1:?usage: api_test.sh API_NATIVE_BINARY}")
export NODE_PATH=/usr/share/nodejs   # Debian's emscripten finds acorn there
build="$root/build/wasm"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_TOOLCHAIN_FILE=/usr/share/emscripten/cmake/Modules/Platform/Emscripten.cmake >/dev/null
cmake --build "$build" --target dnnlab_core
export DNNLAB_CORE_DIR="$build/src/wasm"
node --no-experimental-fetch --test "$here/api.test.mjs"
