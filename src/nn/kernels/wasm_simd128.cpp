// The WebAssembly SIMD128 table: 4-float vectors, 6x8 micro-tile. Only built
// by em++ (-msimd128); wasm has no FMA, so the kernel is mul + add.
#if defined(__EMSCRIPTEN__)
#define DNNLAB_SIMD_W 4
#define DNNLAB_SIMD_MR 6
#define DNNLAB_SIMD_KC 256
#define DNNLAB_SIMD_MC 120
#define DNNLAB_SIMD_NC 1024
#define DNNLAB_SIMD_DIRECT_B_ROWS 65
#define DNNLAB_SIMD_TABLE kWasmSimd128Kernels
#define DNNLAB_SIMD_NAME "wasm-simd128"
#include "nn/kernels/simd_kernels.inc"
#endif
