// The native thread pool behind nn's parallel-for hook (see thread_pool.hpp).
#include "worker/thread_pool.hpp"

#include <stdexcept>
#include <string>

namespace dnnlab::worker {
namespace {

// Set while this thread runs an item: a parallel_for from inside an item
// runs serially instead of re-entering the pool (one job at a time).
thread_local bool t_in_item = false;

}  // namespace

ThreadPool::ThreadPool(int threads) {
  if (threads < 1) throw std::invalid_argument("threads: " + std::to_string(threads) + " < 1");
  workers_.reserve(size_t(threads - 1));
  for (int t = 1; t < threads; ++t) workers_.emplace_back([this] { worker_main(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  start_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::work() {
  t_in_item = true;
  for (int i = next_.fetch_add(1); i < n_; i = next_.fetch_add(1)) (*body_)(i);
  t_in_item = false;
}

void ThreadPool::worker_main() {
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lk(mu_);
      start_cv_.wait(lk, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
    }
    work();
    std::lock_guard<std::mutex> lk(mu_);
    if (--pending_ == 0) done_cv_.notify_one();
  }
}

void ThreadPool::run(int n, const std::function<void(int)>& body) {
  if (workers_.empty() || n <= 1 || t_in_item) {
    for (int i = 0; i < n; ++i) body(i);
    return;
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    body_ = &body;
    n_ = n;
    next_.store(0);
    pending_ = int(workers_.size());
    ++generation_;
  }
  start_cv_.notify_all();
  work();
  // Every worker has left work() before body goes out of scope.
  std::unique_lock<std::mutex> lk(mu_);
  done_cv_.wait(lk, [&] { return pending_ == 0; });
}

nn::ParallelFor ThreadPool::parallel_for() {
  return [this](int n, const std::function<void(int)>& body) { run(n, body); };
}

ParallelScope::ParallelScope(int threads) {
  if (threads <= 1) return;
  pool_ = std::make_unique<ThreadPool>(threads);
  nn::set_parallel_for(pool_->parallel_for());
}

ParallelScope::~ParallelScope() {
  if (pool_) nn::set_parallel_for({});
}

}  // namespace dnnlab::worker
