// The AVX2 table: 8-float vectors, 6x16 micro-tile (12 accumulators of the
// 16 ymm registers). Compiled with -mavx2 -mfma only for this file.
// x86-64 only (an em++ glob of this folder must not build it).
#if defined(__x86_64__) || defined(_M_X64)
#define DNNLAB_SIMD_W 8
#define DNNLAB_SIMD_MR 6
#ifndef DNNLAB_SIMD_KC
#define DNNLAB_SIMD_KC 256
#endif
#ifndef DNNLAB_SIMD_MC
#define DNNLAB_SIMD_MC 120
#endif
#ifndef DNNLAB_SIMD_NC
#define DNNLAB_SIMD_NC 2048
#endif
#ifndef DNNLAB_SIMD_DIRECT_B_ROWS
#define DNNLAB_SIMD_DIRECT_B_ROWS 65
#endif
// spmm pays below about 40% nonzeros here.
#define DNNLAB_SIMD_SPMM_MAX_DENSITY 0.4f
#define DNNLAB_SIMD_TABLE kAvx2Kernels
#define DNNLAB_SIMD_NAME "avx2"
#include "nn/kernels/simd_kernels.inc"
#endif
