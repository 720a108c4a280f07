// The native thread pool behind nn's parallel-for hook: every item runs once,
// jobs follow each other on the same threads, more than one thread really
// works, and the conv kernels and a whole CNN training step give the same
// bits on 1, 2 and 4 threads.
#include "worker/thread_pool.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "nn/kernels.hpp"
#include "nn/model.hpp"
#include "nn/optim.hpp"
#include "nn/spec.hpp"

namespace dnnlab::worker {
namespace {

TEST(ThreadPool, RunsEveryItemExactlyOnce) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.threads(), threads);
    for (int n : {0, 1, 2, 7, 64, 1000}) {
      for (int rep = 0; rep < 3; ++rep) {  // jobs back to back on the same workers
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        pool.run(n, [&](int i) { hits[size_t(i)].fetch_add(1); });
        for (int i = 0; i < n; ++i) ASSERT_EQ(hits[size_t(i)].load(), 1) << threads << " " << n;
      }
    }
  }
}

TEST(ThreadPool, UsesMoreThanOneThread) {
  ThreadPool pool(3);
  std::mutex mu;
  std::set<std::thread::id> ids;
  std::atomic<int> arrived{0};
  // Each item waits (bounded) until three items are in flight at once: only
  // possible if three threads run them.
  pool.run(3, [&](int) {
    {
      std::lock_guard<std::mutex> lk(mu);
      ids.insert(std::this_thread::get_id());
    }
    arrived.fetch_add(1);
    for (int spin = 0; spin < 2000 && arrived.load() < 3; ++spin) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  EXPECT_EQ(ids.size(), 3u);
}

TEST(ThreadPool, ANestedRunIsSerialInsideTheItem) {
  ThreadPool pool(2);
  std::vector<std::vector<int>> seen(4);
  pool.run(4, [&](int i) { pool.run(3, [&](int j) { seen[size_t(i)].push_back(j); }); });
  for (const auto& s : seen) EXPECT_EQ(s, (std::vector<int>{0, 1, 2}));
}

TEST(ThreadPool, RejectsZeroThreads) {
  EXPECT_THROW(ThreadPool(0), std::invalid_argument);
}

TEST(ParallelScope, InstallsThePoolAndPutsSerialBack) {
  const auto self = std::this_thread::get_id();
  {
    ParallelScope scope(2);
    std::atomic<bool> other{false};
    nn::parallel_for(64, [&](int) {
      if (std::this_thread::get_id() != self) other = true;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    });
    EXPECT_TRUE(other.load()) << "the installed pool ran nothing on its worker";
  }
  std::vector<int> order;
  nn::parallel_for(5, [&](int i) {
    EXPECT_EQ(std::this_thread::get_id(), self);
    order.push_back(i);
  });
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4})) << "serial, in order, after the scope";
}

// A CIFAR-10-quick second layer on 11 images: forward, both backward passes.
std::vector<float> conv_step() {
  const nn::ConvShape s{11, 32, 16, 16, 32, 5, 5, 1, 1, 2, 2};
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  auto fill = [&](size_t n) {
    std::vector<float> v(n);
    for (float& x : v) x = d(rng);
    return v;
  };
  const size_t xs = size_t(s.n) * s.c * s.h * s.w, ys = size_t(s.n) * s.k * s.out_h() * s.out_w();
  auto x = fill(xs), w = fill(size_t(s.k) * s.patch()), b = fill(size_t(s.k)), dy = fill(ys);
  std::vector<float> y(ys), dx(xs), dw(w.size()), db(b.size());
  const auto& k = nn::kernels();
  k.conv2d_forward(s, x.data(), w.data(), b.data(), nn::Act::kRelu, 0.f, y.data());
  k.conv2d_backward_data(s, w.data(), dy.data(), dx.data());
  k.conv2d_backward_filter(s, x.data(), dy.data(), dw.data(), db.data(), false);
  std::vector<float> all;
  for (const auto* v : {&y, &dx, &dw, &db}) all.insert(all.end(), v->begin(), v->end());
  return all;
}

TEST(ParallelScope, ConvKernelsGiveTheSameBitsOnAnyThreadCount) {
  const auto serial = conv_step();
  for (int threads : {1, 2, 4}) {
    ParallelScope scope(threads);
    EXPECT_TRUE(conv_step() == serial) << nn::kernels().name << " on " << threads << " threads";
  }
}

// Two SGD steps of conv -> batchnorm -> relu -> max pool -> dense on 16
// images of [2, 28, 28]: the relu is a layer of its own (not fused into the
// conv), large enough (100k floats) that it splits over the threads too.
std::vector<float> cnn_steps() {
  auto layer = [](const char* type, std::initializer_list<std::pair<const char*, double>> a) {
    nn::LayerSpec l;
    l.type = type;
    for (const auto& [k, v] : a) l.attrs.num[k] = v;
    return l;
  };
  nn::ModelSpec spec;
  spec.layers = {layer("conv2d", {{"filters", 8}, {"kernel", 3}, {"padding", 1}}),
                 layer("batchnorm", {}), layer("relu", {}), layer("max_pool2d", {{"kernel", 2}}),
                 layer("dense", {{"units", 10}})};
  nn::Model model = nn::Model::build(spec, nn::Shape{2, 28, 28}, 10, 3);
  nn::OptimizerSpec os;
  os.type = "sgd";
  os.lr = 0.05f;
  os.momentum = 0.9f;
  nn::Optimizer opt(os, model.params());
  nn::Tensor x(nn::Shape{16, 2, 28, 28});
  std::mt19937 rng(9);
  std::normal_distribution<float> d;
  for (int64_t i = 0; i < x.numel(); ++i) x[i] = d(rng);
  std::vector<int32_t> labels(16);
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = int32_t(i % 10);
  for (int step = 0; step < 2; ++step) model.train_step(x.view(), labels.data(), opt);
  std::vector<float> all;
  for (nn::Param* p : model.params()) {
    all.insert(all.end(), p->value.data(), p->value.data() + p->value.numel());
  }
  return all;
}

TEST(ParallelScope, CnnTrainStepsGiveTheSameBitsOnAnyThreadCount) {
  const auto serial = cnn_steps();
  for (int threads : {1, 2, 4}) {
    ParallelScope scope(threads);
    EXPECT_TRUE(cnn_steps() == serial) << nn::kernels().name << " on " << threads << " threads";
  }
}

}  // namespace
}  // namespace dnnlab::worker
