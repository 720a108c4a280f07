#!/usr/bin/env bash
# tests/nn/kernels_test.cpp and conv_test.cpp built with em++ against each wasm kernel table
# (SIMD128 and relaxed SIMD) and run under node: the wasm GEMM and the other
# kernels against the scalar reference on every awkward shape the native
# tables are checked on. Each binary must actually run its wasm table.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
export NODE_PATH=/usr/share/nodejs   # Debian's emscripten finds acorn there
build="${DNNLAB_WASM_BUILD:-$root/build/wasm}"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_TOOLCHAIN_FILE=/usr/share/emscripten/cmake/Modules/Platform/Emscripten.cmake >/dev/null
cmake --build "$build" --target kernels_test_wasm kernels_test_wasm_relaxed
run() {  # run NAME TABLE [node flags...]
  local name=$1 table=$2
  shift 2
  local out
  out=$(node --no-experimental-fetch "$@" "$build/src/wasm/$name.js" 2>&1) || { echo "$out"; exit 1; }
  echo "$out" | tail -3
  # The table this binary links ran (its tests were not all skipped). A here
  # string, not a pipe: grep -q exits at the first match, and under pipefail
  # the SIGPIPE that echo then gets made this check fail now and then.
  local suite
  for suite in Kernel/KernelTarget Conv/ConvTarget; do
    if ! grep -q "^\[       OK \] ${suite}\..*/${table//-/_}\b" <<<"$out"; then
      echo "$out"
      echo "kernels_test.sh: $name ran no $suite test of $table" >&2
      exit 1
    fi
  done
}
run kernels_test_wasm wasm-simd128
flag=--experimental-wasm-relaxed-simd
probe="import('$root/src/wasm/dnnlab_api.mjs').then((m) => process.exit(m.relaxedSimdSupported() ? 0 : 1))"
if node $flag --input-type=module -e "$probe" 2>/dev/null; then
  run kernels_test_wasm_relaxed wasm-relaxed-simd $flag
else
  echo "node $(node --version) has no relaxed SIMD: the relaxed table's kernel tests were built, not run"
fi
