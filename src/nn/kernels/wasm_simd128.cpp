// The WebAssembly SIMD128 table: 4-float vectors, 5x8 micro-tile. Only built
// by em++ (-msimd128), twice: plain SIMD128 has no FMA, so the kernel is
// mul + add; with -mrelaxed-simd (the "wasm-relaxed-simd" build, for engines
// that have relaxed SIMD) it is relaxed_madd, one FMA on x86-64 with FMA3.
// V8 gives wasm 15 xmm registers on x86-64 (xmm15 is its scratch). A 6x8 tile
// needs 16 without FMA (12 accumulators, 2 B vectors, a broadcast, a product),
// so V8 spilled accumulators and every k step waited on a store-to-load round
// trip; 5x8 fits in 14. Unrolling k by 2 makes V8 interleave the two steps
// (4 B vectors live) and spill again, so the loop is not unrolled.
#if defined(__EMSCRIPTEN__)
#define DNNLAB_SIMD_W 4
#ifndef DNNLAB_SIMD_MR
#define DNNLAB_SIMD_MR 5
#endif
#define DNNLAB_SIMD_K_UNROLL 1
#define DNNLAB_SIMD_KC 256
#define DNNLAB_SIMD_MC 120
#define DNNLAB_SIMD_NC 1024
#define DNNLAB_SIMD_DIRECT_B_ROWS 65
// spmm pays below 60% nonzeros: it runs at about 62% of sgemm's multiply-adds
// per second (one load of B per FMA, no reuse across rows).
#define DNNLAB_SIMD_SPMM_MAX_DENSITY 0.6f
#define DNNLAB_SIMD_TABLE kWasmKernels
#if defined(__wasm_relaxed_simd__)
#define DNNLAB_SIMD_NAME "wasm-relaxed-simd"
#else
#define DNNLAB_SIMD_NAME "wasm-simd128"
#endif
#include "nn/kernels/simd_kernels.inc"
#endif
