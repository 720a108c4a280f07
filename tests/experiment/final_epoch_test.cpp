// A trial that trained every epoch it was given is finished, never pruned:
// schedulers give no verdict on a trial's last epoch (the median rule with
// one epoch, an ASHA rung that is some trial's last epoch). Real trials on
// generated data, run by run_worker().
#include <gtest/gtest.h>

#include <string>

#include "experiment/backends.hpp"
#include "experiment/coordinator.hpp"
#include "queue/test_support.hpp"
#include "worker/worker_loop.hpp"

namespace dnnlab {
namespace {

std::int64_t submit_all(const std::string& url, const std::string& yaml) {
  auto b = experiment::open_backends(url, url);
  const auto id = experiment::Coordinator::submit(*b.store, *b.queue, yaml, "final.yaml");
  experiment::Coordinator(*b.store, *b.queue, id).tick(1000);
  return id;
}

void run_one_worker(const std::string& url, std::int64_t exp) {
  worker::WorkerOptions o;
  o.broker_url = o.store_url = url;
  o.experiment = exp;
  o.worker_id = "w";
  o.idle_exit_seconds = 0.3;  // no coordinator ticks here: the experiment stays running
  worker::run_worker(o);
}

std::string sweep(const std::string& epochs, const std::string& scheduler,
                  const std::string& extra_parameters) {
  return R"(name: final
template:
  data: {dataset: synthetic, limit_train: 128, validation: 64}
  model:
    layers:
      - dense: 16
      - relu
      - dense: 10
  train:
    epochs: )" +
         epochs + R"(
    batch_size: 32
    optimizer: {type: sgd, lr: ${lr}}
search:
  method: grid
  parameters:
    lr: [1.0, 0.3, 0.1, 0.03, 0.01, 0.003, 0.001, 0.0001]
)" + extra_parameters +
         "scheduler: " + scheduler + "\n";
}

TEST(FinalEpoch, MedianRuleWithOneEpochPrunesNoTrial) {
  testing::TempDir dir;
  const std::string url = dir.url("dnnlab.db");
  const auto exp = submit_all(url, sweep("1", "{type: median, grace_epochs: 1}", ""));
  run_one_worker(url, exp);
  auto store = store::open_result_store(url);
  const auto c = store->trial_counts(exp);
  EXPECT_EQ(c.finished, 8);
  EXPECT_EQ(c.pruned, 0);
}

TEST(FinalEpoch, AshaRungOnATrialsLastEpochDoesNotPruneIt) {
  testing::TempDir dir;
  const std::string url = dir.url("dnnlab.db");
  // Rungs at epoch 1 only (max_epochs 3): the one-epoch trials end on it.
  const auto exp = submit_all(
      url, sweep("${e}", "{type: asha, min_epochs: 1, reduction_factor: 3}", "    e: [1, 3]\n"));
  run_one_worker(url, exp);
  auto store = store::open_result_store(url);
  store::TrialQuery all;
  all.limit = 0;
  int one_epoch = 0, pruned_at_rung = 0;
  for (const auto& t : store->trials(exp, all)) {
    const int epochs = nlohmann::json::parse(t.config_json).at("e").get<int>();
    if (epochs == 1) {
      ++one_epoch;
      EXPECT_EQ(t.status, store::TrialStatus::finished) << "trial " << t.index;
    } else if (t.status == store::TrialStatus::pruned) {
      ++pruned_at_rung;  // three-epoch trials may still be stopped at epoch 1
      EXPECT_EQ(t.metrics.epochs_done, 1);
    }
  }
  EXPECT_EQ(one_epoch, 8);
  EXPECT_GT(pruned_at_rung, 0) << "the rung at epoch 1 should still stop some 3-epoch trials";
}

}  // namespace
}  // namespace dnnlab
