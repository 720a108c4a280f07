// Convolution and pooling throughput per layer of two small CNNs, batch 64:
// (a) a Fashion-MNIST CNN: conv 3x3 32 pad 1 -> pool 2 -> conv 3x3 64 pad 1
//     -> pool 2 on 1x28x28;
// (b) CIFAR-10-quick: conv 5x5 32 pad 2 -> pool -> conv 5x5 32 pad 2 -> pool
//     -> conv 5x5 64 pad 2 -> pool on 3x32x32.
// Each conv layer: forward (bias + ReLU), backward data, backward filter
// (+ bias), on 1 and 2 threads (worker::ThreadPool through nn's hook);
// GFLOP/s counts 2 * n * k * out_h * out_w * c * kh * kw per pass. Beside
// them: the forward's GEMMs alone (what im2col and the bias add cost is the
// difference) and sgemm 512^3, the single-core peak the conv figures are
// compared with (single-thread figures are on the main thread's CPU time).
// Run:
//   ./build-rel/bench/conv_bench --benchmark_repetitions=3 \
//     --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <random>
#include <string>
#include <vector>

#include "nn/kernels.hpp"
#include "worker/thread_pool.hpp"

namespace {

using dnnlab::nn::Act;
using dnnlab::nn::ConvShape;
using dnnlab::nn::kernels;
using dnnlab::nn::Pool;
using dnnlab::nn::PoolShape;
using dnnlab::nn::Trans;

constexpr int kBatch = 64;

struct Layer {
  const char* name;
  ConvShape s;
};

// {n, c, h, w, k, kh, kw, sh, sw, ph, pw}
const Layer kLayers[] = {
    {"fashion/conv1_1x28x28_32_3x3", {kBatch, 1, 28, 28, 32, 3, 3, 1, 1, 1, 1}},
    {"fashion/conv2_32x14x14_64_3x3", {kBatch, 32, 14, 14, 64, 3, 3, 1, 1, 1, 1}},
    {"cifar/conv1_3x32x32_32_5x5", {kBatch, 3, 32, 32, 32, 5, 5, 1, 1, 2, 2}},
    {"cifar/conv2_32x16x16_32_5x5", {kBatch, 32, 16, 16, 32, 5, 5, 1, 1, 2, 2}},
    {"cifar/conv3_32x8x8_64_5x5", {kBatch, 32, 8, 8, 64, 5, 5, 1, 1, 2, 2}},
};

std::vector<float> random_vec(size_t n) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

double conv_flops(const ConvShape& s) {
  return 2.0 * s.n * s.k * s.out_h() * s.out_w() * s.patch();
}

enum class Pass { kForward, kBackwardData, kBackwardFilter, kForwardGemmOnly };

void BM_Conv(benchmark::State& state, Layer layer, Pass pass) {
  const ConvShape& s = layer.s;
  const int threads = int(state.range(0));
  dnnlab::worker::ParallelScope scope(threads);
  const size_t xs = size_t(s.n) * s.c * s.h * s.w, ys = size_t(s.n) * s.k * s.out_h() * s.out_w();
  const int hw = s.out_h() * s.out_w();
  auto x = random_vec(xs), w = random_vec(size_t(s.k) * s.patch()), b = random_vec(size_t(s.k));
  auto dy = random_vec(ys), col = random_vec(size_t(s.patch()) * hw);
  std::vector<float> y(ys), dx(xs), dw(w.size()), db(b.size());
  const auto& k = kernels();
  for (auto _ : state) {
    switch (pass) {
      case Pass::kForward:
        k.conv2d_forward(s, x.data(), w.data(), b.data(), Act::kRelu, 0.f, y.data());
        break;
      case Pass::kBackwardData:
        k.conv2d_backward_data(s, w.data(), dy.data(), dx.data());
        break;
      case Pass::kBackwardFilter:
        k.conv2d_backward_filter(s, x.data(), dy.data(), dw.data(), db.data(), false);
        break;
      case Pass::kForwardGemmOnly:  // the per-image GEMMs on a ready im2col matrix
        for (int n = 0; n < s.n; ++n) {
          k.sgemm(Trans::kNo, Trans::kNo, s.k, hw, s.patch(), 1.f, w.data(), s.patch(), col.data(),
                  hw, 0.f, y.data() + size_t(n) * s.k * hw, hw, nullptr);
        }
        break;
    }
    benchmark::DoNotOptimize(y.data());
    benchmark::DoNotOptimize(dx.data());
    benchmark::DoNotOptimize(dw.data());
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP/s"] = benchmark::Counter(conv_flops(s) * double(state.iterations()) * 1e-9,
                                                 benchmark::Counter::kIsRate);
  state.SetLabel(k.name);
}

void BM_Pool(benchmark::State& state, PoolShape s, Pool kind, bool backward) {
  const size_t xs = size_t(s.n) * s.c * s.h * s.w, ys = size_t(s.n) * s.c * s.out_h() * s.out_w();
  auto x = random_vec(xs), dy = random_vec(ys);
  std::vector<float> y(ys), dx(xs);
  std::vector<int32_t> am(ys);
  const auto& k = kernels();
  k.pool2d_forward(kind, s, x.data(), y.data(), am.data());
  for (auto _ : state) {
    if (backward) {
      k.pool2d_backward(kind, s, dy.data(), am.data(), dx.data());
    } else {
      k.pool2d_forward(kind, s, x.data(), y.data(), am.data());
    }
    benchmark::DoNotOptimize(y.data());
    benchmark::DoNotOptimize(dx.data());
    benchmark::ClobberMemory();
  }
  state.counters["GB/s"] = benchmark::Counter(
      double(xs + ys) * 4 * double(state.iterations()) * 1e-9, benchmark::Counter::kIsRate);
  state.SetLabel(k.name);
}

void BM_SgemmPeak(benchmark::State& state) {
  const int m = 512;
  auto a = random_vec(size_t(m) * m), b = random_vec(size_t(m) * m);
  std::vector<float> c(size_t(m) * m);
  for (auto _ : state) {
    kernels().sgemm(Trans::kNo, Trans::kNo, m, m, m, 1.f, a.data(), m, b.data(), m, 0.f, c.data(),
                    m, nullptr);
    benchmark::DoNotOptimize(c.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(
      2.0 * m * m * m * double(state.iterations()) * 1e-9, benchmark::Counter::kIsRate);
  state.SetLabel(kernels().name);
}

int register_all() {
  benchmark::RegisterBenchmark("sgemm_peak/512^3", BM_SgemmPeak);
  const std::pair<Pass, const char*> passes[] = {{Pass::kForward, "forward"},
                                                 {Pass::kForwardGemmOnly, "forward_gemm_only"},
                                                 {Pass::kBackwardData, "backward_data"},
                                                 {Pass::kBackwardFilter, "backward_filter"}};
  // One thread: the main thread's CPU time (the rate counters divide by it),
  // which a machine shared with other jobs disturbs least. Two threads: wall
  // time, the only measure of what the second thread buys.
  for (const Layer& l : kLayers) {
    for (const auto& [pass, name] : passes) {
      const std::string base = std::string(l.name) + "/" + name;
      benchmark::RegisterBenchmark(base.c_str(), BM_Conv, l, pass)->ArgName("threads")->Arg(1);
      if (pass != Pass::kForwardGemmOnly) {
        benchmark::RegisterBenchmark(base.c_str(), BM_Conv, l, pass)
            ->ArgName("threads")
            ->Arg(2)
            ->UseRealTime();
      }
    }
  }
  // The pools after each conv layer: 2x2, stride 2.
  const std::pair<const char*, PoolShape> pools[] = {
      {"fashion/pool1_32x28x28", {kBatch, 32, 28, 28, 2, 2, 2, 2, 0, 0}},
      {"cifar/pool1_32x32x32", {kBatch, 32, 32, 32, 2, 2, 2, 2, 0, 0}},
  };
  for (const auto& [name, s] : pools) {
    for (bool backward : {false, true}) {
      benchmark::RegisterBenchmark(
          (std::string(name) + (backward ? "/max_backward" : "/max_forward")).c_str(), BM_Pool, s,
          Pool::kMax, backward);
    }
  }
  return 0;
}

const int registered = register_all();

}  // namespace

BENCHMARK_MAIN();
