// A fixed pool of native threads behind nn's parallel-for hook
// (nn/parallel.hpp): the conv kernels split a batch into items and the pool
// runs them on N threads, the calling thread included. Only `dnnlab train
// --threads N` installs one; sweep workers keep one thread per trial (the
// trials themselves are the parallelism).
//
//   {
//     dnnlab::worker::ParallelScope threads(2);  // installs the hook
//     ...train...
//   }                                            // serial again, pool joined
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "nn/parallel.hpp"

namespace dnnlab::worker {

class ThreadPool {
 public:
  // threads: how many run each job, the caller included (1: no extra threads).
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int threads() const { return int(workers_.size()) + 1; }
  // Runs body(i) for every i in [0, n) and returns when all have finished.
  // Items are handed out one at a time from a shared counter. One job at a
  // time: callers must not run jobs on the pool concurrently (a run from
  // inside an item runs serially on that thread).
  void run(int n, const std::function<void(int)>& body);
  // The hook for nn::set_parallel_for; valid while the pool lives.
  nn::ParallelFor parallel_for();

 private:
  void worker_main();
  void work();

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable start_cv_, done_cv_;
  uint64_t generation_ = 0;  // bumped per job; workers wait for a change
  int pending_ = 0;          // workers still in the current job
  bool stop_ = false;
  const std::function<void(int)>* body_ = nullptr;
  int n_ = 0;
  std::atomic<int> next_{0};
};

// Installs a ThreadPool of `threads` as nn's parallel-for for its lifetime
// (nothing for threads <= 1), and puts the serial default back at the end.
class ParallelScope {
 public:
  explicit ParallelScope(int threads);
  ~ParallelScope();
  ParallelScope(const ParallelScope&) = delete;
  ParallelScope& operator=(const ParallelScope&) = delete;

 private:
  std::unique_ptr<ThreadPool> pool_;
};

}  // namespace dnnlab::worker
