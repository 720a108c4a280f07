// The AVX2 table: 8-float vectors, 6x16 micro-tile (12 accumulators of the
// 16 ymm registers). Compiled with -mavx2 -mfma only for this file.
#define DNNLAB_SIMD_W 8
#define DNNLAB_SIMD_MR 6
#define DNNLAB_SIMD_KC 256
#define DNNLAB_SIMD_MC 120
#define DNNLAB_SIMD_NC 2048
#define DNNLAB_SIMD_DIRECT_B_ROWS 7
#define DNNLAB_SIMD_TABLE kAvx2Kernels
#define DNNLAB_SIMD_NAME "avx2"
#include "nn/kernels/simd_kernels.inc"
