// A worker keeps its trial's lease while a batch takes longer than the lease
// itself: heartbeats follow the clock, not the batch count. Another party
// polls the queue all along; it must never be handed the trial.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "db/task_codec.hpp"
#include "experiment/backends.hpp"
#include "experiment/coordinator.hpp"
#include "queue/test_support.hpp"
#include "worker/worker_loop.hpp"

namespace dnnlab {
namespace {

// One trial, two epochs of one big batch each: each batch takes several
// times the 0.5 s lease on any machine this runs on.
constexpr const char* kSlowBatches = R"(name: slow-batches
template:
  data: {dataset: synthetic, limit_train: 4096, validation: 64}
  model:
    layers:
      - dense: 2048
      - relu
      - dense: 2048
      - relu
      - dense: 10
  train:
    epochs: 2
    batch_size: 4096
    optimizer: {type: sgd, lr: ${lr}}
search:
  method: grid
  parameters:
    lr: [0.01]
)";

TEST(WorkerLease, ABatchLongerThanTheLeaseKeepsTheTrial) {
  testing::TempDir dir;
  const std::string url = dir.url("dnnlab.db");
  auto b = experiment::open_backends(url, url);
  const auto exp = experiment::Coordinator::submit(*b.store, *b.queue, kSlowBatches, "slow.yaml");
  experiment::Coordinator(*b.store, *b.queue, exp).tick();
  const std::string q = db::queue_name(exp);

  std::atomic<bool> done{false};
  std::thread worker([&] {
    worker::WorkerOptions o;
    o.broker_url = o.store_url = url;
    o.experiment = exp;
    o.worker_id = "w";
    o.lease_seconds = 0.5;
    o.idle_exit_seconds = 0.3;
    worker::run_worker(o);
    done = true;
  });
  // Once the worker holds the trial, whoever asks for the task gets it only
  // if the worker's lease expired.
  const auto trial_id = b.store->trials(exp, {}).at(0).id;
  while (!done && b.store->trial(trial_id)->status == store::TrialStatus::queued)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  int stolen = 0;
  auto thief = queue::open_task_queue(url);
  while (!done) {
    if (auto lease = thief->lease(q, "thief", 60)) {
      ++stolen;
      thief->nack(*lease, /*requeue=*/true, "thief gives it back");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  worker.join();
  EXPECT_EQ(stolen, 0) << "the worker's lease expired while it trained";
  store::TrialQuery all;
  auto trials = b.store->trials(exp, all);
  ASSERT_EQ(trials.size(), 1u);
  EXPECT_EQ(trials[0].status, store::TrialStatus::finished) << trials[0].error;
  EXPECT_EQ(trials[0].attempt, 1);
  EXPECT_EQ(trials[0].metrics.epochs_done, 2);
}

}  // namespace
}  // namespace dnnlab
