// The AVX-512 table: 16-float vectors, 14x32 micro-tile (28 accumulators of
// the 32 zmm registers, 2 for B, 1 broadcast). Compiled with -mavx512* only
// for this file; dispatch.cpp checks the CPU before using it.
// x86-64 only (an em++ glob of this folder must not build it).
#if defined(__x86_64__) || defined(_M_X64)
#define DNNLAB_SIMD_W 16
#define DNNLAB_SIMD_MR 14
#ifndef DNNLAB_SIMD_KC
#define DNNLAB_SIMD_KC 256
#endif
#ifndef DNNLAB_SIMD_MC
#define DNNLAB_SIMD_MC 168
#endif
#ifndef DNNLAB_SIMD_NC
#define DNNLAB_SIMD_NC 2048
#endif
#ifndef DNNLAB_SIMD_DIRECT_B_ROWS
#define DNNLAB_SIMD_DIRECT_B_ROWS 65
#endif
// spmm never pays here: with 16-float vectors sgemm's reuse of B in registers
// is worth more than skipping even 70% of the products (bench/RESULTS.md).
#define DNNLAB_SIMD_SPMM_MAX_DENSITY 0.f
#define DNNLAB_SIMD_TABLE kAvx512Kernels
#define DNNLAB_SIMD_NAME "avx512"
#include "nn/kernels/simd_kernels.inc"
#endif
