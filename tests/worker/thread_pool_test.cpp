// The native thread pool behind nn's parallel-for hook: every item runs once,
// jobs follow each other on the same threads, more than one thread really
// works, and the conv kernels give the same bits on 1, 2 and 4 threads.
#include "worker/thread_pool.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "nn/kernels.hpp"

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

}  // namespace
}  // namespace dnnlab::worker
