// CNN training throughput (issue 14): samples/s of a full SGD training step
// (forward, backward, update) on random data of the right shape, on N threads
// through nn's parallel-for hook. One measurement per process, printed as a
// `RESULT key=value ...` line; bench/run_cnn_bench.sh alternates it with the
// PyTorch peer bench/torch_cnn.py and prints the ratios.
//
//   cnn_bench --config fashion --threads 2 --seconds 4
//
// Configs (batch 64, SGD lr 0.01 momentum 0.9, softmax cross-entropy):
//   fashion:  the net of examples/fashion-cnn.yaml (87,434 parameters) on
//             [1, 28, 28]: conv 3x3 32 pad 1, batchnorm, relu, max pool 2,
//             dropout 0.1, conv 3x3 64 pad 1, batchnorm, relu, max pool 2,
//             conv 3x3 64 pad 1, batchnorm, relu, dropout 0.4, dense 10
//   fashion2: the 2-block net that example had until 2026-12-03 evening
//             (the figures in bench/RESULTS.md before then): conv 3x3 32 pad 1,
//             batchnorm, relu, max pool 2, conv 3x3 64 pad 1, batchnorm, relu,
//             max pool 2, dropout 0.3, dense 10
//   cifar:   CIFAR-10-quick on [3, 32, 32]: (conv 5x5 pad 2, relu, max pool 2)
//            with 32, 32, 64 filters, dense 64 relu, dense 10
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
#include "worker/thread_pool.hpp"

namespace nn = dnnlab::nn;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int64_t kClasses = 10;
constexpr int kBatch = 64;

nn::LayerSpec layer(const char* type,
                    std::initializer_list<std::pair<const char*, double>> a = {}) {
  nn::LayerSpec l;
  l.type = type;
  for (const auto& [k, v] : a) l.attrs.num[k] = v;
  return l;
}

nn::LayerSpec conv(int filters, int kernel, int padding) {
  return layer("conv2d", {{"filters", filters}, {"kernel", kernel}, {"padding", padding}});
}

// false for an unknown name.
bool config_by_name(const std::string& name, nn::ModelSpec* s, nn::Shape* input) {
  s->layers.clear();
  if (name == "fashion") {
    *input = nn::Shape{1, 28, 28};
    const auto block = [&](int filters) {
      s->layers.push_back(conv(filters, 3, 1));
      s->layers.push_back(layer("batchnorm"));
      s->layers.push_back(layer("relu"));
    };
    block(32);
    s->layers.push_back(layer("max_pool2d", {{"kernel", 2}}));
    s->layers.push_back(layer("dropout", {{"rate", 0.1}}));
    block(64);
    s->layers.push_back(layer("max_pool2d", {{"kernel", 2}}));
    block(64);
    s->layers.push_back(layer("dropout", {{"rate", 0.4}}));
    s->layers.push_back(layer("dense", {{"units", kClasses}}));
  } else if (name == "fashion2") {
    *input = nn::Shape{1, 28, 28};
    for (int f : {32, 64}) {
      s->layers.push_back(conv(f, 3, 1));
      s->layers.push_back(layer("batchnorm"));
      s->layers.push_back(layer("relu"));
      s->layers.push_back(layer("max_pool2d", {{"kernel", 2}}));
    }
    s->layers.push_back(layer("dropout", {{"rate", 0.3}}));
    s->layers.push_back(layer("dense", {{"units", kClasses}}));
  } else if (name == "cifar") {
    *input = nn::Shape{3, 32, 32};
    for (int f : {32, 32, 64}) {
      s->layers.push_back(conv(f, 5, 2));
      s->layers.push_back(layer("relu"));
      s->layers.push_back(layer("max_pool2d", {{"kernel", 2}}));
    }
    s->layers.push_back(layer("dense", {{"units", 64}}));
    s->layers.push_back(layer("relu"));
    s->layers.push_back(layer("dense", {{"units", kClasses}}));
  } else {
    return false;
  }
  return true;
}

// CPU time of the whole process (all pool threads): with other jobs on the
// machine, samples per CPU-second is steadier than per wall-second.
double process_cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

const char* arg(int argc, char** argv, const char* name, const char* def) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return argv[i + 1];
  return def;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string name = arg(argc, argv, "--config", "fashion");
  const int threads = std::atoi(arg(argc, argv, "--threads", "1"));
  const double seconds = std::atof(arg(argc, argv, "--seconds", "4"));
  const double warmup = std::atof(arg(argc, argv, "--warmup", "1"));
  const int windows = std::atoi(arg(argc, argv, "--windows", "5"));
  nn::ModelSpec spec;
  nn::Shape input;
  if (!config_by_name(name, &spec, &input)) {
    std::fprintf(stderr, "unknown --config '%s' (fashion, fashion2, cifar)\n", name.c_str());
    return 2;
  }
  if (threads < 1 || threads > 256) {
    std::fprintf(stderr, "--threads must be in [1, 256], got %d\n", threads);
    return 2;
  }
  dnnlab::worker::ParallelScope scope(threads);
  nn::Model model = nn::Model::build(spec, input, kClasses, 1);
  nn::OptimizerSpec os;
  os.type = "sgd";
  os.lr = 0.01f;
  os.momentum = 0.9f;
  nn::Optimizer opt(os, model.params());

  // Distinct pre-generated batches, cycled: N(0,1) pixels, uniform labels.
  const int pool = 8;
  nn::Shape shape{int64_t{pool} * kBatch};
  for (int i = 0; i < input.rank; ++i) shape[shape.rank++] = input[i];
  nn::Tensor x(shape);
  std::vector<int32_t> y(static_cast<size_t>(pool) * kBatch);
  std::mt19937_64 gen(42);
  std::normal_distribution<float> nd;
  std::uniform_int_distribution<int32_t> ud(0, kClasses - 1);
  for (int64_t i = 0; i < x.numel(); ++i) x[i] = nd(gen);
  for (auto& v : y) v = ud(gen);
  std::vector<nn::TensorView> xs;
  for (int i = 0; i < pool; ++i) xs.push_back(x.view().rows(int64_t{i} * kBatch, kBatch));

  int64_t step = 0;
  std::vector<double> rates, cpu_rates;
  auto run_for = [&](double secs) {
    const auto t0 = Clock::now();
    const double c0 = process_cpu_seconds();
    int64_t steps = 0;
    double el = 0;
    do {
      const int i = static_cast<int>(step % pool);
      model.train_step(xs[i], y.data() + int64_t{i} * kBatch, opt);
      ++steps, ++step;
      el = std::chrono::duration<double>(Clock::now() - t0).count();
    } while (el < secs);
    rates.push_back(steps / el);
    cpu_rates.push_back(steps / (process_cpu_seconds() - c0));
  };
  run_for(warmup);
  rates.clear();
  cpu_rates.clear();
  for (int w = 0; w < windows; ++w) run_for(seconds / windows);
  std::printf(
      "RESULT impl=dnnlab config=%s threads=%d kernels=%s params=%lld batch=%d "
      "samples_per_s=%.1f cpu_samples_per_s=%.1f\n",
      name.c_str(), threads, nn::kernels().name, static_cast<long long>(model.num_params()), kBatch,
      median(rates) * kBatch, median(cpu_rates) * kBatch);
  return 0;
}
