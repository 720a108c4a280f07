// The WebAssembly SIMD128 table: 4-float vectors, 5x8 micro-tile. Only built
// by em++ (-msimd128); wasm has no FMA, so the kernel is mul + add.
// V8 gives wasm 15 xmm registers on x86-64 (xmm15 is its scratch). A 6x8 tile
// needs 16 (12 accumulators, 2 B vectors, a broadcast, a product), so V8
// spilled accumulators and every k step waited on a store-to-load round trip;
// 5x8 fits in 14. Unrolling k by 2 makes V8 interleave the two steps (4 B
// vectors live) and spill again, so the loop is not unrolled.
#if defined(__EMSCRIPTEN__)
#define DNNLAB_SIMD_W 4
#define DNNLAB_SIMD_MR 5
#define DNNLAB_SIMD_K_UNROLL 1
#define DNNLAB_SIMD_KC 256
#define DNNLAB_SIMD_MC 120
#define DNNLAB_SIMD_NC 1024
#define DNNLAB_SIMD_DIRECT_B_ROWS 65
#define DNNLAB_SIMD_TABLE kWasmSimd128Kernels
#define DNNLAB_SIMD_NAME "wasm-simd128"
#include "nn/kernels/simd_kernels.inc"
#endif
