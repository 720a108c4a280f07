// The lease service: one rule per outcome of a trial's life (lease, start,
// epoch, finish, fail, give back, lost), on a SQLite queue and store
// sharing a file, the way a worker and the gateway's ticket desk use it.
#include "experiment/lease_service.hpp"

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "db/task_codec.hpp"
#include "experiment/backends.hpp"
#include "experiment/catalogue.hpp"
#include "experiment/coordinator.hpp"
#include "queue/test_support.hpp"

namespace dnnlab::lease_service_test {
namespace {

using experiment::LeaseService;
using Got = LeaseService::Got;

constexpr const char* kSweep = R"(name: leases
template:
  data: {dataset: synthetic, limit_train: 64, validation: 64}
  model:
    layers:
      - dense: ${width}
      - dense: 10
  train:
    epochs: 3
    batch_size: 64
    optimizer: {type: sgd, lr: 0.1}
search:
  method: grid
  parameters:
    width: [4, 8]
)";

struct LeaseFixture {
  dnnlab::testing::TempDir dir;
  experiment::Backends b;
  std::int64_t exp = 0;
  std::unique_ptr<experiment::Catalogue> catalogue;
  std::unique_ptr<LeaseService> svc;
  int released = 0;  // on_release calls

  explicit LeaseFixture(const char* sweep = kSweep, bool hold_last = true) {
    const std::string url = dir.url("dnnlab.db");
    b = experiment::open_backends(url, url);
    exp = experiment::Coordinator::submit(*b.store, *b.queue, sweep, "leases.yaml");
    experiment::Coordinator(*b.store, *b.queue, exp).tick();  // publishes the trials
    catalogue = std::make_unique<experiment::Catalogue>(*b.store);
    svc = std::make_unique<LeaseService>(*b.store, *b.queue, *catalogue,
                                         experiment::LeaseServiceOptions{
                                             hold_last, [this](const auto&) { ++released; }});
  }
  store::TrialRecord trial(std::int64_t id) { return *b.store->trial(id); }
  std::string q() const { return db::queue_name(exp); }
};

store::EpochMetrics epoch(std::int64_t e, double val_acc = 0.5) {
  store::EpochMetrics m;
  m.epoch = e;
  m.train_loss = 1.0 / static_cast<double>(e);
  m.train_acc = val_acc;
  m.val_loss = 1.0 / static_cast<double>(e);
  m.val_acc = val_acc;
  m.seconds = 0.01;
  return m;
}

TEST(LeaseService, ALeaseResolvesTheSpecAndAStartedTrialEndsCountedOnce) {
  LeaseFixture f;
  experiment::TrialLease l;
  ASSERT_EQ(f.svc->lease(f.exp, "w1", 30, l), Got::kLeased);
  EXPECT_EQ(l.worker, "w1");
  EXPECT_EQ(l.attempt, 1);
  EXPECT_EQ(l.run.train.epochs, 3);
  ASSERT_EQ(l.run.model.layers.size(), 2U);
  EXPECT_EQ(l.run.model.layers[0].attrs.get("units", 0), l.trial.index == 0 ? 4 : 8)
      << "the trial's own width";
  EXPECT_FALSE(l.started);
  ASSERT_TRUE(f.svc->start(l, {{"dataset", "synthetic"}}));
  EXPECT_EQ(f.trial(l.trial.id).status, store::TrialStatus::running);

  for (int e = 1; e <= 3; ++e) EXPECT_TRUE(f.svc->report_epoch(l, epoch(e), true).go);
  ASSERT_TRUE(l.last_epoch) << "the last epoch waits for the end";
  EXPECT_EQ(l.last_epoch->epoch, 3);
  const std::int64_t id = l.trial.id;
  store::TrialMetrics m;
  m.epochs_done = 3;
  f.svc->finish(std::move(l), store::TrialStatus::finished, m);
  EXPECT_TRUE(f.svc->pending());
  EXPECT_EQ(f.trial(id).status, store::TrialStatus::running) << "written at commit, not before";
  const std::vector<bool> counted = f.svc->commit();
  ASSERT_EQ(counted.size(), 1U);
  EXPECT_TRUE(counted[0]);
  const auto t = f.trial(id);
  EXPECT_EQ(t.status, store::TrialStatus::finished);
  EXPECT_EQ(t.curve.size(), 3U) << "the held-back last epoch is stored with the end";
  EXPECT_GE(f.released, 1) << "the task was let go of (acked) after the end";
  EXPECT_EQ(f.b.queue->waiting(f.q()), 1) << "only the other trial's task is left";
}

TEST(LeaseService, ARefusedStartAcksTheDuplicateTask) {
  LeaseFixture f;
  experiment::TrialLease l;
  ASSERT_EQ(f.svc->lease(f.exp, "w1", 30, l), Got::kLeased);
  // Another worker runs a newer attempt of the same trial meanwhile.
  ASSERT_TRUE(f.b.store->mark_running(l.trial.id, l.attempt + 1, "w2"));
  EXPECT_FALSE(f.svc->start(l, nlohmann::json::object()));
  EXPECT_EQ(f.released, 1);
  // Acked: it is not delivered again when its lease would have expired.
  EXPECT_FALSE(f.b.queue->extend(l.task, 30)) << "the task is done with";
}

TEST(LeaseService, AnUnreadableTaskIsDeadLetteredAndNothingIsHandedOut) {
  LeaseFixture f("name: one\ntemplate:\n  data: {dataset: synthetic, limit_train: 8}\n"
            "  model: {layers: [{dense: 10}]}\n  train: {epochs: 1, batch_size: 8, "
            "optimizer: {type: sgd, lr: ${lr}}}\nsearch: {method: grid, parameters: {lr: [0.1]}}\n");
  // Drain the real task, then publish garbage.
  experiment::TrialLease real;
  ASSERT_EQ(f.svc->lease(f.exp, "w1", 30, real), Got::kLeased);
  f.b.queue->publish(f.q(), "{not a task");
  experiment::TrialLease l;
  EXPECT_EQ(f.svc->lease(f.exp, "w1", 30, l), Got::kSkipped);
  EXPECT_EQ(f.b.queue->waiting(queue::dead_letter_queue(f.q())), 1);
  EXPECT_EQ(f.svc->lease(f.exp, "w1", 30, l), Got::kNone);
}

TEST(LeaseService, ATrialThatCannotRunFailsOnceWithTheReason) {
  LeaseFixture f;
  experiment::TrialLease l;
  ASSERT_EQ(f.svc->lease(f.exp, "w1", 30, l), Got::kLeased);
  const std::int64_t id = l.trial.id;
  f.svc->fail(std::move(l), "data set: no such file");
  f.svc->commit();
  const auto t = f.trial(id);
  EXPECT_EQ(t.status, store::TrialStatus::failed);
  EXPECT_NE(t.error.find("no such file"), std::string::npos) << t.error;
}

TEST(LeaseService, AGiveBackRequeuesANewerAttemptWithoutSpendingMaxAttempts) {
  LeaseFixture f;
  // The queue's max_attempts is 3: five give-backs in a row must not kill the task.
  std::int64_t id = 0;
  int attempt = 0;
  for (int i = 0; i < 5; ++i) {
    experiment::TrialLease l;
    ASSERT_EQ(f.svc->lease(f.exp, "w" + std::to_string(i), 30, l), Got::kLeased);
    if (id == 0) id = l.trial.id;
    if (l.trial.id != id) {  // the other trial: give it back too, it is not the one watched
      f.svc->give_back(l);
      ASSERT_EQ(f.svc->lease(f.exp, "w" + std::to_string(i), 30, l), Got::kLeased);
    }
    ASSERT_EQ(l.trial.id, id);
    EXPECT_GT(l.attempt, attempt) << "each lease after a give-back runs a newer attempt";
    attempt = l.attempt;
    ASSERT_TRUE(f.svc->start(l, nlohmann::json::object()));
    EXPECT_TRUE(f.svc->report_epoch(l, epoch(1), true).go);
    f.svc->give_back(l);
    const auto t = f.trial(id);
    EXPECT_EQ(t.status, store::TrialStatus::queued) << "released: it waits for a new attempt";
  }
  EXPECT_EQ(f.b.queue->waiting(queue::dead_letter_queue(f.q())), 0);
  EXPECT_EQ(f.b.queue->waiting(f.q()), 2);
}

TEST(LeaseService, ALostLeaseWritesNothingAndItsEpochsAreRefused) {
  LeaseFixture f;
  experiment::TrialLease l;
  ASSERT_EQ(f.svc->lease(f.exp, "w1", 30, l), Got::kLeased);
  ASSERT_TRUE(f.svc->start(l, nlohmann::json::object()));
  // Someone else runs a newer attempt now.
  f.b.store->release_trial(l.trial.id, l.attempt);
  ASSERT_TRUE(f.b.store->mark_running(l.trial.id, l.attempt + 1, "w2"));
  const LeaseService::Verdict v = f.svc->report_epoch(l, epoch(1), true, /*write_now=*/true);
  EXPECT_TRUE(v.lost);
  f.svc->lost(l);
  EXPECT_FALSE(f.svc->pending());
  const auto t = f.trial(l.trial.id);
  EXPECT_EQ(t.worker, "w2");
  EXPECT_TRUE(t.curve.empty());
}

TEST(LeaseService, AProvisionalEndIsStoredButNotCounted) {
  LeaseFixture f(kSweep, /*hold_last=*/false);  // the gateway's way: every epoch written at once
  experiment::TrialLease l;
  ASSERT_EQ(f.svc->lease(f.exp, "browser-1", 30, l), Got::kLeased);
  ASSERT_TRUE(f.svc->start(l, nlohmann::json::object()));
  for (int e = 1; e <= 3; ++e) EXPECT_FALSE(f.svc->report_epoch(l, epoch(e), false, true).lost);
  EXPECT_FALSE(l.last_epoch);
  EXPECT_EQ(f.trial(l.trial.id).curve.size(), 3U) << "written as they came";
  const std::int64_t id = l.trial.id;
  f.svc->finish(std::move(l), store::TrialStatus::finished, {}, {}, /*provisional=*/true);
  const auto counted = f.svc->commit();
  ASSERT_EQ(counted.size(), 1U);
  EXPECT_TRUE(counted[0]);
  const auto t = f.trial(id);
  EXPECT_EQ(t.status, store::TrialStatus::finished);
  EXPECT_TRUE(t.provisional);
  EXPECT_FALSE(f.b.store->best_trial(f.exp)) << "a provisional result is never ranked";
}

TEST(LeaseService, AGoneExperimentThrowsBeforeAnythingIsLeased) {
  LeaseFixture f;
  experiment::TrialLease l;
  EXPECT_THROW(f.svc->lease(f.exp + 100, "w1", 30, l), std::invalid_argument);
  EXPECT_EQ(f.b.queue->waiting(f.q()), 2);
}

}  // namespace
}  // namespace dnnlab::lease_service_test
