#!/usr/bin/env bash
# Builds the wasm core (dnnlab_core + dnnlab.mjs) with em++ and runs
# api.test.mjs against it; $1 is the native build of the same C API, $2 the
# native shard writer.
#   tests/wasm/api_test.sh build/release/tests/wasm/api_native build/release/tests/wasm/make_shard
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
export DNNLAB_API_NATIVE=$(realpath "${1:?usage: api_test.sh API_NATIVE_BINARY MAKE_SHARD_BINARY}")
if [ -n "${2:-}" ]; then export DNNLAB_MAKE_SHARD=$(realpath "$2"); fi
export NODE_PATH=/usr/share/nodejs   # Debian's emscripten finds acorn there
build="${DNNLAB_WASM_BUILD:-$root/build/wasm}"   # ctest: <build>/wasm-core, shared with web_core
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_TOOLCHAIN_FILE=/usr/share/emscripten/cmake/Modules/Platform/Emscripten.cmake >/dev/null
cmake --build "$build" --target dnnlab_core
export DNNLAB_CORE_DIR="$build/src/wasm"
node --no-experimental-fetch --test "$here/api.test.mjs"
