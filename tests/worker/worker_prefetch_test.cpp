// run_worker() on trivial trials, where a worker leases several trials at a
// time: a stopped worker gives all of them back, a killed one loses them to
// lease expiry, and in both cases every trial ends exactly once.
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <thread>

#include "db/task_codec.hpp"
#include "experiment/backends.hpp"
#include "experiment/coordinator.hpp"
#include "queue/test_support.hpp"
#include "worker/worker_loop.hpp"

namespace dnnlab {
namespace {

constexpr int kTrials = 300;

// A sweep of `kTrials` one-step trials on generated data, all published.
std::int64_t publish_sweep(const std::string& url) {
  auto b = experiment::open_backends(url, url);
  const std::string yaml = R"(name: prefetch
template:
  data: {dataset: synthetic, limit_train: 64, validation: 64}
  model:
    layers:
      - dense: 10
  train:
    epochs: 1
    batch_size: 64
    optimizer: {type: sgd, lr: ${lr}}
search:
  method: random
  budget: )" + std::to_string(kTrials) +
                           R"(
  parameters:
    lr: {loguniform: [1.0e-4, 1.0e-1]}
)";
  auto id = experiment::Coordinator::submit(*b.store, *b.queue, yaml, "prefetch.yaml");
  experiment::Coordinator c(*b.store, *b.queue, id);
  c.tick();
  EXPECT_EQ(b.queue->waiting(db::queue_name(id)), kTrials);
  return id;
}

worker::WorkerOptions options(const std::string& url, std::int64_t exp, const char* id) {
  worker::WorkerOptions o;
  o.broker_url = o.store_url = url;
  o.experiment = exp;
  o.worker_id = id;
  o.idle_exit_seconds = 0.3;  // the experiment stays "running": no coordinator ticks here
  return o;
}

void expect_each_trial_ended_once(const std::string& url, std::int64_t exp) {
  auto b = experiment::open_backends(url, url);
  auto counts = b.store->trial_counts(exp);
  EXPECT_EQ(counts.finished, kTrials);
  EXPECT_EQ(counts.total(), kTrials);
  EXPECT_EQ(b.queue->waiting(db::queue_name(exp)), 0);
  EXPECT_EQ(b.queue->waiting(queue::dead_letter_queue(db::queue_name(exp))), 0);
  EXPECT_FALSE(b.queue->lease(db::queue_name(exp), "late", 10)) << "every task acked";
}

TEST(WorkerPrefetch, StoppedWorkerGivesItsLeasedTrialsBack) {
  testing::TempDir dir;
  const std::string url = dir.url("p.db");
  const auto exp = publish_sweep(url);
  std::atomic<bool> stop{false};
  std::atomic<std::int64_t> ended{-1};
  std::thread t([&] {
    auto o = options(url, exp, "w-stopped");
    o.stop = &stop;
    ended = worker::run_worker(o);
  });
  auto store = store::open_result_store(url);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (store->trial_counts(exp).finished < 40 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  stop = true;
  t.join();
  auto counts = store->trial_counts(exp);
  EXPECT_EQ(counts.running, 0) << "prefetched trials were not released";
  EXPECT_EQ(counts.finished, ended.load());
  EXPECT_EQ(counts.queued + counts.finished, kTrials);
  auto queue = queue::open_task_queue(url);
  EXPECT_EQ(queue->waiting(db::queue_name(exp)), counts.queued)
      << "every unended trial's task waits again: none is left leased";

  EXPECT_EQ(worker::run_worker(options(url, exp, "w-rest")), counts.queued);
  expect_each_trial_ended_once(url, exp);
}

TEST(WorkerPrefetch, KilledWorkersTrialsAreRedeliveredAndCountedOnce) {
  testing::TempDir dir;
  const std::string url = dir.url("p.db");
  const auto exp = publish_sweep(url);
  auto codes = testing::run_in_children(1, [&](int) {
    auto o = options(url, exp, "w-killed");
    o.lease_seconds = 1;
    std::thread([&] {
      // Dies mid-sweep, holding leases, without a word.
      auto store = store::open_result_store(url);
      while (store->trial_counts(exp).finished < 20)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      raise(SIGKILL);
    }).detach();
    worker::run_worker(o);
    return 0;
  });
  ASSERT_EQ(codes.at(0), 128 + SIGKILL) << "the sweep ended before the kill: make it longer";
  auto store = store::open_result_store(url);
  const auto before = store->trial_counts(exp);
  EXPECT_GT(before.running, 0) << "the killed worker held no trials";
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));  // its leases expire

  EXPECT_EQ(worker::run_worker(options(url, exp, "w-rest")), kTrials - before.finished);
  expect_each_trial_ended_once(url, exp);
  store::TrialQuery q;
  q.sort_by = "attempt";
  q.descending = true;
  q.limit = 1;
  EXPECT_EQ(store->trials(exp, q).at(0).attempt, 2);
}

}  // namespace
}  // namespace dnnlab
