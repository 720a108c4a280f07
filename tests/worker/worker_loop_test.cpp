// The worker's loop over queue and store on one shared file:
// lease -> mark_running -> record_epoch -> finish_trial -> ack.
// In one process (rate printed, not asserted) and in forked processes with a
// redelivery, checking that every trial is counted exactly once.
#include <gtest/gtest.h>

#include <chrono>
#include <ctime>
#include <thread>

#include "queue/task_queue.hpp"
#include "queue/test_support.hpp"
#include "store/result_store.hpp"

namespace dnnlab {
namespace {

// Publishes one task per trial; the payload is the trial id.
std::int64_t prepare_sweep(const std::string& url, int n) {
  auto store = store::open_result_store(url);
  auto queue = queue::open_task_queue(url);
  store::ExperimentRecord e;
  e.name = "loop";
  e.spec_text = "trials: " + std::to_string(n);
  auto exp = store->create_experiment(e);
  std::vector<store::NewTrial> trials;
  for (int i = 0; i < n; ++i) trials.push_back({i, "{}", static_cast<std::uint64_t>(i)});
  std::vector<std::string> payloads;
  for (auto id : store->add_trials(exp, trials)) payloads.push_back(std::to_string(id));
  queue->publish_batch("exp-" + std::to_string(exp), payloads);
  return exp;
}

// One trivial "training" run; returns how many trials this worker counted.
int work(queue::TaskQueue& queue, store::ResultStore& store, const std::string& queue_name,
         const std::string& worker) {
  int counted = 0;
  while (auto lease = queue.lease(queue_name, worker, 5)) {
    std::int64_t trial = std::stoll(lease->payload);
    if (store.mark_running(trial, lease->attempt, worker)) {
      store::EpochMetrics epoch;
      epoch.epoch = 1;
      epoch.train_loss = 0.5;
      epoch.val_acc = 0.9;
      store.record_epoch(trial, lease->attempt, epoch);
      store::TrialMetrics m;
      m.val_acc = 0.9;
      m.epochs_done = 1;
      if (store.finish_trial(trial, lease->attempt, store::TrialStatus::finished, m)) ++counted;
    }
    queue.ack(*lease);
  }
  return counted;
}

TEST(WorkerLoop, TenThousandTrivialTrialsInOneProcess) {
  constexpr int kTrials = 10'000;
  testing::TempDir dir;
  const std::string url = dir.url("sweep.db");
  auto exp = prepare_sweep(url, kTrials);
  auto store = store::open_result_store(url);
  auto queue = queue::open_task_queue(url);
  auto start = std::chrono::steady_clock::now();
  std::clock_t cpu_start = std::clock();
  int counted = work(*queue, *store, "exp-" + std::to_string(exp), "w1");
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  double cpu = static_cast<double>(std::clock() - cpu_start) / CLOCKS_PER_SEC;
  // CPU time too: on a loaded machine the wall-clock rate mostly measures the load.
  std::printf(
      "[ rate     ] lease+mark_running+record_epoch+finish_trial+ack: %d trials in "
      "%.3f s wall (%.0f trials/s), %.3f s CPU (%.0f trials per CPU second)\n",
      kTrials, s, kTrials / s, cpu, kTrials / cpu);
  EXPECT_EQ(counted, kTrials);
  EXPECT_EQ(store->trial_counts(exp).finished, kTrials);
  EXPECT_EQ(queue->waiting("exp-" + std::to_string(exp)), 0);
  EXPECT_FALSE(queue->lease("exp-" + std::to_string(exp), "late", 10)) << "every task acked";
}

TEST(WorkerLoop, ForkedWorkersCountEachTrialOnce) {
  constexpr int kTrials = 2000;
  constexpr int kWorkers = 4;
  testing::TempDir dir;
  const std::string url = dir.url("sweep.db");
  auto exp = prepare_sweep(url, kTrials);
  const std::string queue_name = "exp-" + std::to_string(exp);

  auto start = std::chrono::steady_clock::now();
  auto codes = testing::run_in_children(kWorkers, [&](int w) {
    auto store = store::open_result_store(url);
    auto queue = queue::open_task_queue(url);
    const std::string worker{'w', static_cast<char>('0' + w)};  // w < 10
    if (w == 0) {
      // Starts a trial and dies without finishing it or acking its lease.
      auto lease = queue->lease(queue_name, "w0-crashed", 0.3);
      if (!lease || !store->mark_running(std::stoll(lease->payload), lease->attempt, "w0-crashed"))
        return 3;
    }
    for (;;) {
      work(*queue, *store, queue_name, worker);
      // The store knows when every trial ended; the queue counts no leases.
      if (store->trial_counts(exp).finished == kTrials) return 0;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // wait for the expiry
    }
  });
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (int code : codes) EXPECT_EQ(code, 0);

  auto store = store::open_result_store(url);
  auto counts = store->trial_counts(exp);
  EXPECT_EQ(counts.finished, kTrials);
  EXPECT_EQ(counts.total(), kTrials);
  store::TrialQuery q;
  q.sort_by = "attempt";
  q.descending = true;
  q.limit = 1;
  auto retried = store->trials(exp, q).at(0);
  EXPECT_EQ(retried.attempt, 2) << "the crashed worker's trial was not redelivered";
  EXPECT_EQ(retried.status, store::TrialStatus::finished);
  EXPECT_FALSE(queue::open_task_queue(url)->lease(queue_name, "late", 10)) << "every task acked";
  std::printf("[ rate     ] %d processes ran %d trials end to end in %.3f s (%.0f trials/s)\n",
              kWorkers, kTrials, s, kTrials / s);
}

}  // namespace
}  // namespace dnnlab
