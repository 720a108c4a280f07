// Training-throughput and depth benchmarks for the nn core (issue 2): one
// measurement per process, printed as a `RESULT key=value ...` line that
// bench/run_train_bench.sh collects, alternating with bench/torch_train.py.
//
//   train_bench throughput --config a --seconds 3   # samples/s, steady state
//   train_bench depth --depth 64 --samples 10000    # seconds per epoch
//   train_bench shapes --config a                   # where a step's time goes, per kernel call
//
// Configs (784 features, 10 classes, random data, single thread):
//   a: MLP 784-256-256-10 relu, SGD lr 0.01 momentum 0.9, batch 64
//   b: the same with Adam (lr 1e-3)
//   c: 16 hidden layers of 256 relu, SGD, batch 64
//   d: 784-32-10 relu, SGD, batch 1 (per-step overhead)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <string>
#include <vector>

#include "nn/kernels.hpp"
#include "nn/model.hpp"
#include "nn/optim.hpp"
#include "nn/spec.hpp"
#include "nn/train.hpp"

namespace nn = dnnlab::nn;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int64_t kFeatures = 784, kClasses = 10;

struct Config {
  std::vector<int64_t> hidden;
  std::string optimizer;
  int batch;
};

bool config_by_name(const std::string& name, Config* c) {
  if (name == "a")
    *c = {{256, 256}, "sgd", 64};
  else if (name == "b")
    *c = {{256, 256}, "adam", 64};
  else if (name == "c")
    *c = {std::vector<int64_t>(16, 256), "sgd", 64};
  else if (name == "d")
    *c = {{32}, "sgd", 1};
  else
    return false;
  return true;
}

nn::ModelSpec mlp(const std::vector<int64_t>& hidden) {
  nn::ModelSpec s;
  auto layer = [](const char* type, int64_t units) {
    nn::LayerSpec l;
    l.type = type;
    if (units) l.attrs.num["units"] = static_cast<double>(units);
    return l;
  };
  for (int64_t w : hidden) {
    s.layers.push_back(layer("dense", w));
    s.layers.push_back(layer("relu", 0));  // fused into the dense layer by Model::build
  }
  s.layers.push_back(layer("dense", kClasses));
  return s;
}

nn::OptimizerSpec optimizer(const std::string& type) {
  nn::OptimizerSpec o;
  o.type = type;
  if (type == "sgd") {
    o.lr = 0.01f;
    o.momentum = 0.9f;
  } else {
    o.lr = 1e-3f;
  }
  return o;
}

// Random data of the right shape: N(0,1) features, uniform labels.
void random_data(int64_t n, nn::Tensor* x, std::vector<int32_t>* y, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> nd;
  std::uniform_int_distribution<int32_t> ud(0, kClasses - 1);
  x->resize(nn::Shape{n, kFeatures});
  for (int64_t i = 0; i < x->numel(); ++i) (*x)[i] = nd(gen);
  y->resize(n);
  for (auto& v : *y) v = ud(gen);
}

// CPU time of this thread: with other jobs on the machine, steps per CPU-second
// is steadier than steps per wall-second (both are reported).
double thread_cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

const char* arg(int argc, char** argv, const char* name, const char* def) {
  for (int i = 2; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return argv[i + 1];
  return def;
}

int throughput(int argc, char** argv) {
  const std::string name = arg(argc, argv, "--config", "a");
  const double seconds = std::atof(arg(argc, argv, "--seconds", "3"));
  const double warmup = std::atof(arg(argc, argv, "--warmup", "0.5"));
  const int windows = std::atoi(arg(argc, argv, "--windows", "5"));
  Config c;
  if (!config_by_name(name, &c)) {
    std::fprintf(stderr, "unknown config '%s' (a, b, c, d)\n", name.c_str());
    return 2;
  }
  nn::Model model = nn::Model::build(mlp(c.hidden), nn::Shape{kFeatures}, kClasses, 1);
  nn::Optimizer opt(optimizer(c.optimizer), model.params());
  const int pool = 16;  // distinct pre-generated batches, cycled
  nn::Tensor x;
  std::vector<int32_t> y;
  random_data(int64_t{pool} * c.batch, &x, &y, 42);
  std::vector<nn::TensorView> xs;
  for (int i = 0; i < pool; ++i) xs.push_back(x.view().rows(int64_t{i} * c.batch, c.batch));

  int64_t step = 0;
  std::vector<double> rates, cpu_rates;
  auto run_for = [&](double secs) {
    const auto t0 = Clock::now();
    const double c0 = thread_cpu_seconds();
    int64_t steps = 0;
    double el = 0;
    do {
      for (int j = 0; j < 16; ++j, ++steps, ++step) {
        const int i = static_cast<int>(step % pool);
        model.train_step(xs[i], y.data() + int64_t{i} * c.batch, opt);
      }
      el = std::chrono::duration<double>(Clock::now() - t0).count();
    } while (el < secs);
    rates.push_back(steps / el);
    cpu_rates.push_back(steps / (thread_cpu_seconds() - c0));
  };
  run_for(warmup);
  rates.clear();
  cpu_rates.clear();
  for (int w = 0; w < windows; ++w) run_for(seconds / windows);
  const double steps_s = median(rates), cpu_steps_s = median(cpu_rates);
  std::printf(
      "RESULT impl=dnnlab config=%s kernels=%s params=%lld batch=%d steps_per_s=%.2f "
      "samples_per_s=%.1f cpu_samples_per_s=%.1f\n",
      name.c_str(), nn::kernels().name, static_cast<long long>(model.num_params()), c.batch,
      steps_s, steps_s * c.batch, cpu_steps_s * c.batch);
  return 0;
}

int depth(int argc, char** argv) {
  const int d = std::atoi(arg(argc, argv, "--depth", "1"));
  const int64_t samples = std::atoll(arg(argc, argv, "--samples", "10000"));
  const int width = std::atoi(arg(argc, argv, "--width", "64"));
  const int epochs = std::atoi(arg(argc, argv, "--epochs", "3"));
  nn::Model model =
      nn::Model::build(mlp(std::vector<int64_t>(d, width)), nn::Shape{kFeatures}, kClasses, 1);
  nn::TrainSpec ts;
  ts.batch_size = 64;
  ts.epochs = epochs + 1;
  ts.optimizer.type = "sgd";
  ts.optimizer.lr = 0.01f;
  ts.optimizer.momentum = 0.9f;
  nn::Trainer trainer(model, ts);
  nn::Tensor x;
  std::vector<int32_t> y;
  random_data(samples, &x, &y, 7);
  nn::LabeledData data{x.view(), y.data()};
  trainer.run_epoch(0, data, nullptr, nullptr);  // warm-up
  std::vector<double> secs, cpu_secs;
  for (int e = 1; e <= epochs; ++e) {
    const double c0 = thread_cpu_seconds();
    secs.push_back(trainer.run_epoch(e, data, nullptr, nullptr).seconds);
    cpu_secs.push_back(thread_cpu_seconds() - c0);
  }
  std::printf(
      "RESULT impl=dnnlab depth=%d width=%d samples=%lld params=%lld seconds=%.5f "
      "cpu_seconds=%.5f\n",
      d, width, static_cast<long long>(samples), static_cast<long long>(model.num_params()),
      median(secs), median(cpu_secs));
  return 0;
}

// Times, in thread-CPU microseconds, every kernel call one train_step of the
// config makes (the same calls Dense::forward/backward and Optimizer::step
// make), so a shortfall can be pinned on one GEMM shape.
int shapes(int argc, char** argv) {
  const std::string name = arg(argc, argv, "--config", "a");
  Config c;
  if (!config_by_name(name, &c)) return 2;
  const nn::Kernels& kn = nn::kernels();
  const int m = c.batch;
  std::vector<int> dims{static_cast<int>(kFeatures)};
  for (int64_t h : c.hidden) dims.push_back(static_cast<int>(h));
  dims.push_back(static_cast<int>(kClasses));
  auto buf = [](size_t n) {
    std::vector<float> v(n);
    std::mt19937 g(3);
    std::normal_distribution<float> nd;
    for (auto& x : v) x = nd(g);
    return v;
  };
  auto time_us = [](auto&& f) {
    for (int i = 0; i < 20; ++i) f();
    std::vector<double> t;
    for (int r = 0; r < 7; ++r) {
      int reps = 0;
      const double c0 = thread_cpu_seconds();  // a syscall: read every 32 calls only
      double el = 0;
      do {
        for (int i = 0; i < 32; ++i, ++reps) f();
        el = thread_cpu_seconds() - c0;
      } while (el < 0.02);
      t.push_back(1e6 * el / reps);
    }
    return median(t);
  };
  double total = 0;
  struct Row {
    std::string what;
    double us;
    int count;
    double flops;
  };
  std::vector<Row> rows;  // identical calls (same kind and shape) merged
  auto row = [&](const std::string& what, int mm, int nn_, int kk, double us) {
    total += us;
    char dims[64];
    if (mm)
      std::snprintf(dims, sizeof dims, " %dx%dx%d", mm, nn_, kk);
    else
      std::snprintf(dims, sizeof dims, " n=%d", nn_ * kk);
    const std::string key = what + dims;
    auto it = std::find_if(rows.begin(), rows.end(), [&](const Row& r) { return r.what == key; });
    if (it == rows.end())
      rows.push_back({key, us, 1, 2.0 * mm * nn_ * kk});
    else
      it->us += us, ++it->count;
  };
  for (size_t l = 0; l + 1 < dims.size(); ++l) {
    const int k = dims[l], n = dims[l + 1];
    auto x = buf(size_t(m) * k), w = buf(size_t(k) * n), y = buf(size_t(m) * n),
         dw = buf(size_t(k) * n), dx = buf(size_t(m) * k), b = buf(n), v = buf(size_t(k) * n);
    const bool last = l + 2 == dims.size();
    nn::Epilogue ep{b.data(), last ? nn::Act::kIdentity : nn::Act::kRelu, 0.f};
    const std::string L;
    row(L + "fwd NN+bias" + (last ? "" : "+relu"), m, n, k, time_us([&] {
          kn.sgemm(nn::Trans::kNo, nn::Trans::kNo, m, n, k, 1.f, x.data(), k, w.data(), n, 0.f,
                   y.data(), n, &ep);
        }));
    if (!last)
      row(L + "relu backward", 0, m, n, time_us([&] {
            kn.act_backward(nn::Act::kRelu, 0.f, y.data(), y.data(), y.data(), size_t(m) * n);
          }));
    row(L + "dW = x^T dy (TN)", k, n, m, time_us([&] {
          kn.sgemm(nn::Trans::kYes, nn::Trans::kNo, k, n, m, 1.f, x.data(), k, y.data(), n, 0.f,
                   dw.data(), n, nullptr);
        }));
    row(L + "db col_sum", 0, m, n,
        time_us([&] { kn.col_sum(y.data(), m, n, n, b.data(), false); }));
    if (l > 0)
      row(L + "dx = dy W^T (NT)", m, k, n, time_us([&] {
            kn.sgemm(nn::Trans::kNo, nn::Trans::kYes, m, k, n, 1.f, y.data(), n, w.data(), n, 0.f,
                     dx.data(), k, nullptr);
          }));
    nn::SgdParams sp{1e-9f, 0.9f, 0.f, false};
    row(L + "sgd_step (w+b)", 0, k * n + n, 1, time_us([&] {
          kn.sgd_step(w.data(), dw.data(), v.data(), size_t(k) * n, sp);
          kn.sgd_step(b.data(), b.data(), b.data(), size_t(n), sp);
        }));
  }
  std::printf(
      "| call (m x n x k) | calls/step | us/call | GFLOP/s | share of step |\n"
      "|---|---:|---:|---:|---:|\n");
  for (const Row& r : rows) {
    const double us = r.us / r.count;
    std::printf("| %s | %d | %.2f | %s | %.1f%% |\n", r.what.c_str(), r.count, us,
                r.flops ? std::to_string(static_cast<int>(r.flops / us * 1e-3 + 0.5)).c_str() : "–",
                100 * r.us / total);
  }
  std::printf(
      "\nsum of kernel calls: %.1f us/step = %.0f samples/s (thread CPU time, kernels "
      "%s)\n",
      total, 1e6 / total * m, kn.name);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  try {
    if (mode == "throughput") return throughput(argc, argv);
    if (mode == "depth") return depth(argc, argv);
    if (mode == "shapes") return shapes(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_bench: %s\n", e.what());
    return 1;
  }
  std::fprintf(stderr,
               "usage: train_bench throughput --config a|b|c|d [--seconds S] [--warmup S]\n"
               "       train_bench depth --depth D [--samples N] [--width W] [--epochs E]\n"
               "       train_bench shapes --config a|b|c|d\n");
  return 2;
}
