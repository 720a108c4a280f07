// Chooses the kernel table at run time. On x86 the SIMD tables are compiled
// with their own -m flags (see kernels.cmake), so this file (baseline flags)
// must ask the CPU before calling into them.
#include <atomic>
#include <cstdint>
#include <memory>

#include "nn/kernels.hpp"
#include "nn/kernels/targets.hpp"
#include "nn/parallel.hpp"

namespace dnnlab::nn {
namespace {

using kernels_detail::kScalarKernels;

bool supported(const Kernels& k) {
#if defined(DNNLAB_KERNELS_X86) && !defined(DNNLAB_NO_AVX512_KERNELS)
  if (&k == &kernels_detail::kAvx512Kernels) {
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("fma");
  }
#endif
#if defined(DNNLAB_KERNELS_X86)
  if (&k == &kernels_detail::kAvx2Kernels) {
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  }
#endif
  return true;  // scalar, and wasm (an engine without the SIMD it uses rejects the module)
}

// Best first.
const Kernels* const kTables[] = {
#if defined(__EMSCRIPTEN__)
    &kernels_detail::kWasmKernels,
#elif defined(DNNLAB_KERNELS_X86)
#if !defined(DNNLAB_NO_AVX512_KERNELS)  // DNNLAB_AVX512_KERNELS (kernels.cmake)
    &kernels_detail::kAvx512Kernels,
#endif
    &kernels_detail::kAvx2Kernels,
#endif
    &kScalarKernels,
};

const Kernels* best() {
  for (const Kernels* k : kTables) {
    if (supported(*k)) return k;
  }
  return &kScalarKernels;
}

// Atomic only so a test that switches targets cannot tear the pointer; the
// nn core itself is single-threaded per process.
std::atomic<const Kernels*>& selected() {
  static std::atomic<const Kernels*> table{best()};
  return table;
}

}  // namespace

namespace kernels_detail {

float* gemm_scratch(size_t floats) {
  // Per thread so that concurrent callers (a multi-threaded server) never
  // share packing space; a single-threaded worker allocates exactly once.
  thread_local std::unique_ptr<float[]> buf;
  thread_local size_t capacity = 0;
  if (capacity < floats) {
    buf.reset(new float[floats + 16]);
    capacity = floats;
  }
  // 64-byte alignment keeps packed panels on cache-line boundaries.
  auto addr = reinterpret_cast<uintptr_t>(buf.get());
  return reinterpret_cast<float*>((addr + 63) & ~uintptr_t(63));
}

float* conv_scratch(ConvScratch slot, size_t floats) {
  thread_local std::unique_ptr<float[]> buf[kConvScratchSlots];
  thread_local size_t capacity[kConvScratchSlots] = {};
  if (capacity[slot] < floats) {
    buf[slot].reset(new float[floats + 16]);
    capacity[slot] = floats;
  }
  auto addr = reinterpret_cast<uintptr_t>(buf[slot].get());
  return reinterpret_cast<float*>((addr + 63) & ~uintptr_t(63));
}

int32_t* conv_taps_scratch(size_t n) {
  thread_local std::unique_ptr<int32_t[]> buf;
  thread_local size_t capacity = 0;
  if (capacity < n) {
    buf.reset(new int32_t[n]);
    capacity = n;
  }
  return buf.get();
}

void parallel_items(int n, void (*body)(void* ctx, int item), void* ctx) {
  parallel_for(n, [body, ctx](int i) { body(ctx, i); });
}

}  // namespace kernels_detail

const Kernels& kernels() {
  return *selected().load(std::memory_order_relaxed);
}

bool select_kernels(std::string_view name) {
  if (name == "auto") {
    selected().store(best(), std::memory_order_relaxed);
    return true;
  }
  for (const Kernels* k : kTables) {
    if (name == k->name && supported(*k)) {
      selected().store(k, std::memory_order_relaxed);
      return true;
    }
  }
  return false;
}

std::vector<std::string_view> kernel_targets() {
  std::vector<std::string_view> names;
  for (const Kernels* k : kTables)
    if (supported(*k)) names.push_back(k->name);
  return names;
}

}  // namespace dnnlab::nn
