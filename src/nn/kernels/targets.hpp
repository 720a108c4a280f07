// Internal to src/nn/kernels: the per-target kernel tables the dispatcher
// chooses from, and the scalar helpers the SIMD tails share with the reference.
#pragma once
#include <cstddef>
#include <cstdint>

#include "nn/kernels.hpp"

namespace dnnlab::nn::kernels_detail {

float ref_act(Act act, float alpha, float x);
float ref_act_grad(Act act, float alpha, float y);
// The portable compress_rows (reference.cpp), for targets without a faster one.
void compress_rows_scalar(const float* a, int m, int k, int lda, int32_t* nnz, int32_t* idx,
                          float* val, int stride);

extern const Kernels kScalarKernels;
#if defined(__EMSCRIPTEN__)
// Defined by whichever wasm kernel object the module links (see kernels.cmake).
extern const Kernels kWasmKernels;
#elif defined(__x86_64__) || defined(_M_X64)
#define DNNLAB_KERNELS_X86 1
extern const Kernels kAvx2Kernels;
extern const Kernels kAvx512Kernels;
#endif

}  // namespace dnnlab::nn::kernels_detail

namespace dnnlab::nn::kernels_detail {
// GEMM packing space for the calling thread, allocated on first use and kept:
// no allocation per call. Lives in dispatch.cpp so it is compiled with
// baseline flags.
float* gemm_scratch(size_t floats);

// Conv work space for the calling thread, one buffer per slot (an item's
// im2col matrix or packed B panel and padded image, a caller's per-chunk
// partial sums and packed weights, which the items only read), allocated on
// first use and kept like gemm_scratch.
enum ConvScratch : int {
  kConvCol = 0,
  kConvPad = 1,
  kConvPartials = 2,
  kConvPackedW = 3,
  kConvScratchSlots = 4
};
float* conv_scratch(ConvScratch slot, size_t floats);
// The calling thread's table of im2col tap offsets (implicit GEMM), like
// conv_scratch: computed by a conv call's caller, read by its items.
int32_t* conv_taps_scratch(size_t n);

// nn::parallel_for (nn/parallel.hpp) behind a plain function pointer: target
// code must not instantiate std::function (its inline members would be
// shared by every target's object and the linker keeps one, whichever flags
// it was built with). Runs body(ctx, i) for i in [0, n).
void parallel_items(int n, void (*body)(void* ctx, int item), void* ctx);
}  // namespace dnnlab::nn::kernels_detail
