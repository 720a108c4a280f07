// `validation: 0` holds nothing out, so there is no validation value: the
// store, the curves and metrics.json say none, never 0 (a val_loss of 0
// would be the best there is).
#include <gtest/gtest.h>

#include <string>

#include "experiment/backends.hpp"
#include "experiment/coordinator.hpp"
#include "queue/test_support.hpp"
#include "sweep/sweep_spec.hpp"
#include "experiment/training_run.hpp"
#include "worker/worker_loop.hpp"

namespace dnnlab {
namespace {

constexpr const char* kNoValidation = R"(name: no-val
template:
  data: {dataset: synthetic, limit_train: 256, validation: 0}
  model:
    layers:
      - dense: 16
      - relu
      - dense: 10
  train:
    epochs: 2
    batch_size: 64
    optimizer: {type: sgd, lr: ${lr}}
search:
  method: grid
  metric: train_loss
  parameters:
    lr: [0.1, 0.01]
)";

TEST(NoValidation, TrialsStoreNoValidationValues) {
  testing::TempDir dir;
  const std::string url = dir.url("dnnlab.db");
  auto b = experiment::open_backends(url, url);
  const auto exp = experiment::Coordinator::submit(*b.store, *b.queue, kNoValidation, "nv.yaml");
  experiment::Coordinator(*b.store, *b.queue, exp).tick();
  worker::WorkerOptions o;
  o.broker_url = o.store_url = url;
  o.experiment = exp;
  o.worker_id = "w";
  o.idle_exit_seconds = 0.3;
  worker::run_worker(o);

  store::TrialQuery all;
  const auto trials = b.store->trials(exp, all);
  ASSERT_EQ(trials.size(), 2u);
  for (const auto& listed : trials) {
    const auto t = b.store->trial(listed.id);
    ASSERT_EQ(t->status, store::TrialStatus::finished) << t->error;
    EXPECT_TRUE(t->metrics.train_loss);
    EXPECT_FALSE(t->metrics.val_acc) << *t->metrics.val_acc;
    EXPECT_FALSE(t->metrics.val_loss) << *t->metrics.val_loss;
    EXPECT_FALSE(t->metrics.test_acc) << "the synthetic set has no test split without validation";
    ASSERT_EQ(t->curve.size(), 2u);
    for (const auto& e : t->curve) {
      EXPECT_TRUE(e.train_loss);
      EXPECT_FALSE(e.val_acc);
      EXPECT_FALSE(e.val_loss);
    }
  }
  // The best by val_loss is none at all, not the worst trial.
  EXPECT_FALSE(b.store->best_trial(exp, "val_loss", false));
  EXPECT_TRUE(b.store->best_trial(exp, "train_loss", false));
}

TEST(NoValidation, MetricsJsonHasNullValidationValues) {
  const sweep::SweepSpec s = sweep::parse_sweep(kNoValidation, "nv.yaml");
  const nn::RunSpec run = s.instantiate({{"lr", 0.1}});
  const data::Dataset data = data::load(experiment::load_options(run.data, ""));
  const experiment::RunResult r = experiment::train_run(run, data, nullptr);
  const nlohmann::json j = experiment::result_json(run, r, data);
  EXPECT_TRUE(j["val_acc"].is_null()) << j["val_acc"];
  EXPECT_TRUE(j["test_acc"].is_null()) << j["test_acc"];
  ASSERT_EQ(j["epochs"].size(), 2u);
  for (const auto& e : j["epochs"]) {
    EXPECT_TRUE(e["val_acc"].is_null()) << e;
    EXPECT_TRUE(e["val_loss"].is_null()) << e;
    EXPECT_TRUE(e["train_loss"].is_number()) << e;
  }
}

}  // namespace
}  // namespace dnnlab
