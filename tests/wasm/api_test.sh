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
export DNNLAB_CORE_DIR="$build/src/wasm"
flags=(--no-experimental-fetch)
if [ "${DNNLAB_CORE_SIMD:-simd128}" = relaxed ]; then
  # The relaxed-SIMD build needs an engine with relaxed SIMD: node 20 has it
  # behind a flag; an older node cannot run this test (ctest: skipped).
  flags+=(--experimental-wasm-relaxed-simd)
  probe="import('$here/../../src/wasm/dnnlab_api.mjs').then((m) => process.exit(m.relaxedSimdSupported() ? 0 : 1))"
  if ! node "${flags[@]}" --input-type=module -e "$probe" 2>/dev/null; then
    echo "node $(node --version) has no relaxed SIMD: skipping the relaxed build's test"
    [ -n "${CI:-}" ] && { echo "under CI this test may not skip"; exit 1; }
    exit 77
  fi
  cmake --build "$build" --target dnnlab_core_relaxed
else
  cmake --build "$build" --target dnnlab_core
fi
node "${flags[@]}" --test "$here/api.test.mjs"
