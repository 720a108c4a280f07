// Dense's sparse paths against sgemm on one kernel table, batch 64: the
// time of each sparse path over the sgemm it replaces, at densities 0.3..0.8
// (the figures behind each table's spmm_max_density; bench/RESULTS.md,
// "Sparse ReLU products"). Plain C++, so the same file builds with em++.
// Natively: build/bench/bench/spmm_bench [avx2|avx512|scalar]. In wasm
// (relaxed SIMD; drop -mrelaxed-simd, the rewrite and the node flag for the
// SIMD128 build), from the repository root, with NODE_PATH=/usr/share/nodejs:
//
//   em++ -O3 -msimd128 -mrelaxed-simd -fno-math-errno -std=c++20 -Isrc
//        bench/spmm_bench.cpp src/nn/sparse.cpp src/nn/kernels/reference.cpp
//        src/nn/kernels/dispatch.cpp src/nn/kernels/wasm_simd128.cpp
//        -o /tmp/spmm_bench.js
//   node src/wasm/relaxed_simd.mjs /tmp/spmm_bench.wasm
//   node --no-experimental-fetch --experimental-wasm-relaxed-simd /tmp/spmm_bench.js
//
// Columns: fwd (y = x W, x sparse), dW(x) (dW = x^T dy, x sparse), dW(dy)
// (dW^T = dy^T x, then transposed; dy sparse), dx(dy) (W transposed, then
// dy W^T). Each includes building the sparse form; below 1 the sparse path
// wins.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include "nn/kernels.hpp"
#include "nn/sparse.hpp"

using namespace dnnlab::nn;

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Best of 5 runs of 100 calls, in microseconds per call.
template <typename F>
double time_us(F f) {
  for (int r = 0; r < 5; ++r) f();
  double best = 1e30;
  for (int t = 0; t < 5; ++t) {
    const double t0 = now();
    for (int r = 0; r < 100; ++r) f();
    best = std::min(best, (now() - t0) / 100 * 1e6);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && !select_kernels(argv[1])) {
    std::fprintf(stderr, "spmm_bench: no kernel table '%s' here\n", argv[1]);
    return 2;
  }
  const Kernels& kn = kernels();
  std::printf("%s (spmm_max_density %.2f)\n", kn.name, kn.spmm_max_density);
  std::mt19937 g(1);
  std::normal_distribution<float> nd;
  std::uniform_real_distribution<float> ud;
  const int m = 64, n = 256;
  for (int k : {256, 784}) {
    std::vector<float> x(size_t(m) * k), w(size_t(k) * n), y(size_t(m) * n), dy(size_t(m) * n),
        dw(size_t(k) * n), dx(size_t(m) * k), scratch(size_t(k) * n);
    for (float& v : w) v = nd(g);
    SparseBuffer sb;
    std::printf("%-10s %7s %7s %7s %7s %7s   sgemm us: fwd dW dx\n", "k x n", "density", "fwd",
                "dW(x)", "dW(dy)", "dx(dy)");
    for (double dens : {0.3, 0.4, 0.5, 0.6, 0.7, 0.8}) {
      for (float& v : x) v = ud(g) < dens ? nd(g) : 0.f;
      for (float& v : dy) v = ud(g) < dens ? nd(g) : 0.f;
      const double f_d = time_us([&] {
        kn.sgemm(Trans::kNo, Trans::kNo, m, n, k, 1.f, x.data(), k, w.data(), n, 0.f, y.data(), n,
                 nullptr);
      });
      const double f_s = time_us([&] {
        kn.spmm(sb.from_rows(kn, x.data(), m, k, k), n, w.data(), n, 0.f, y.data(), n, nullptr);
      });
      const double w_d = time_us([&] {
        kn.sgemm(Trans::kYes, Trans::kNo, k, n, m, 1.f, x.data(), k, dy.data(), n, 0.f, dw.data(),
                 n, nullptr);
      });
      const double w_s = time_us([&] {
        kn.spmm(sb.from_cols(kn, x.data(), m, k, k), n, dy.data(), n, 0.f, dw.data(), n, nullptr);
      });
      const double wt_s = time_us([&] {
        kn.spmm(sb.from_cols(kn, dy.data(), m, n, n), k, x.data(), k, 0.f, scratch.data(), k,
                nullptr);
        kn.transpose(scratch.data(), n, k, k, dw.data(), n);
      });
      const double x_d = time_us([&] {
        kn.sgemm(Trans::kNo, Trans::kYes, m, k, n, 1.f, dy.data(), n, w.data(), n, 0.f, dx.data(),
                 k, nullptr);
      });
      const double x_s = time_us([&] {
        kn.transpose(w.data(), k, n, n, scratch.data(), k);
        kn.spmm(sb.from_rows(kn, dy.data(), m, n, n), k, scratch.data(), k, 0.f, dx.data(), k,
                nullptr);
      });
      std::printf("%4dx%-5d %7.1f %7.2f %7.2f %7.2f %7.2f   %.0f %.0f %.0f\n", k, n, dens,
                  f_s / f_d, w_s / w_d, wt_s / w_d, x_s / x_d, f_d, w_d, x_d);
    }
  }
  return 0;
}
