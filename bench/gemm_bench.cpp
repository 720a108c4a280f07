// SGEMM throughput, dnnlab kernels vs OpenBLAS cblas_sgemm, single thread.
// Run: OPENBLAS_NUM_THREADS=1 OPENBLAS_CORETYPE=SkylakeX gemm_bench
//      --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
// Each shape is named by op(A) x op(B) transposes and m/n/k; the GFLOP/s
// counter is 2*m*n*k per iteration.
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <cstdint>
#include <random>
#include <vector>

#include "nn/kernels.hpp"

namespace {

using dnnlab::nn::Trans;

struct Shape {
  Trans ta, tb;
  int m, n, k;
};

// 64-byte aligned, as dnnlab tensors are: a misaligned C splits every
// 64-byte store over two cache lines, for either library.
struct AlignedBuffer {
  std::vector<float> storage;
  float* ptr = nullptr;
  void assign(size_t n, float v) {
    storage.assign(n + 16, v);
    auto addr = reinterpret_cast<uintptr_t>(storage.data());
    ptr = storage.data() + ((64 - addr % 64) % 64) / sizeof(float);
  }
  float* data() { return ptr; }
  float* begin() { return ptr; }
  float* end() { return ptr + storage.size() - 16; }
};

struct Operands {
  AlignedBuffer a, b, c;
  int lda, ldb, ldc;
  explicit Operands(const Shape& s) {
    std::mt19937 rng(42);
    std::uniform_real_distribution<float> d(-1.f, 1.f);
    const int a_rows = s.ta == Trans::kNo ? s.m : s.k;
    lda = s.ta == Trans::kNo ? s.k : s.m;
    const int b_rows = s.tb == Trans::kNo ? s.k : s.n;
    ldb = s.tb == Trans::kNo ? s.n : s.k;
    ldc = s.n;
    a.assign(size_t(a_rows) * lda, 0.f);
    b.assign(size_t(b_rows) * ldb, 0.f);
    c.assign(size_t(s.m) * ldc, 0.f);
    for (float& x : a) x = d(rng);
    for (float& x : b) x = d(rng);
  }
};

void set_flops(benchmark::State& state, const Shape& s) {
  state.counters["GFLOP/s"] = benchmark::Counter(
      2.0 * s.m * s.n * s.k * double(state.iterations()) * 1e-9, benchmark::Counter::kIsRate);
}

void BM_dnnlab(benchmark::State& state, Shape s) {
  Operands o(s);
  const auto& k = dnnlab::nn::kernels();
  state.SetLabel(k.name);
  for (auto _ : state) {
    k.sgemm(s.ta, s.tb, s.m, s.n, s.k, 1.f, o.a.data(), o.lda, o.b.data(), o.ldb, 0.f, o.c.data(),
            o.ldc, nullptr);
    benchmark::DoNotOptimize(o.c.data());
    benchmark::ClobberMemory();
  }
  set_flops(state, s);
}

void BM_openblas(benchmark::State& state, Shape s) {
  Operands o(s);
  auto tr = [](Trans t) { return t == Trans::kNo ? CblasNoTrans : CblasTrans; };
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, tr(s.ta), tr(s.tb), s.m, s.n, s.k, 1.f, o.a.data(), o.lda,
                o.b.data(), o.ldb, 0.f, o.c.data(), o.ldc);
    benchmark::DoNotOptimize(o.c.data());
    benchmark::ClobberMemory();
  }
  set_flops(state, s);
}

// Square sizes, then the batch-64 MLP (784-256-10) training shapes and the
// batch-1 784-32-10 step.
const Shape kShapes[] = {
    {Trans::kNo, Trans::kNo, 64, 64, 64},    {Trans::kNo, Trans::kNo, 256, 256, 256},
    {Trans::kNo, Trans::kNo, 512, 512, 512}, {Trans::kNo, Trans::kNo, 1024, 1024, 1024},
    {Trans::kNo, Trans::kNo, 64, 256, 784},  {Trans::kNo, Trans::kYes, 64, 784, 256},
    {Trans::kYes, Trans::kNo, 784, 256, 64}, {Trans::kNo, Trans::kNo, 64, 10, 256},
    {Trans::kNo, Trans::kYes, 64, 256, 10},  {Trans::kYes, Trans::kNo, 256, 10, 64},
    {Trans::kNo, Trans::kNo, 1, 32, 784},    {Trans::kNo, Trans::kYes, 1, 784, 32},
    {Trans::kYes, Trans::kNo, 784, 32, 1},
};

std::string shape_name(const Shape& s) {
  std::string t = std::string(s.ta == Trans::kNo ? "N" : "T") + (s.tb == Trans::kNo ? "N" : "T");
  return t + "/" + std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k);
}

int register_all = [] {
  for (const Shape& s : kShapes) {
    benchmark::RegisterBenchmark(("sgemm_dnnlab/" + shape_name(s)).c_str(), BM_dnnlab, s);
    benchmark::RegisterBenchmark(("sgemm_openblas/" + shape_name(s)).c_str(), BM_openblas, s);
  }
  return 0;
}();

}  // namespace

BENCHMARK_MAIN();
