// A trial whose task dies in the queue (given back by max_attempts workers in
// a row) must end as failed, or the experiment would wait for it forever:
// the queue sends the dead task on as a dead letter and the coordinator's
// next tick fails the trial with the queue's reasons.
#include <gtest/gtest.h>

#include <memory>

#include "db/task_codec.hpp"
#include "experiment/backends.hpp"
#include "experiment/coordinator.hpp"
#include "queue/test_support.hpp"

namespace dnnlab {
namespace {

constexpr const char* kSweep = R"(name: dead-letters
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
  method: grid
  parameters:
    lr: [0.1, 0.01, 0.001]
)";

TEST(DeadLetters, ATaskTheQueueGivesUpOnFailsItsTrialAndTheExperimentFinishes) {
  testing::TempDir dir;
  const std::string url = dir.url("dnnlab.db");
  auto b = experiment::open_backends(url, url);  // max_attempts 3
  const auto exp = experiment::Coordinator::submit(*b.store, *b.queue, kSweep, "dead.yaml");
  const std::string q = db::queue_name(exp);
  auto coord = std::make_unique<experiment::Coordinator>(*b.store, *b.queue, exp);
  EXPECT_EQ(coord->tick().counts.queued, 3);

  // The first trial's task: taken by three workers that each die or give up
  // on it (the last one after marking it running).
  std::int64_t doomed = 0;
  for (int i = 1; i <= 3; ++i) {
    auto lease = b.queue->lease(q, "w" + std::to_string(i), 30);
    ASSERT_TRUE(lease);
    EXPECT_EQ(lease->attempt, i);
    doomed = db::decode_task(lease->payload).trial_id;
    if (i == 3) {
      ASSERT_TRUE(b.store->mark_running(doomed, 3, "w3"));
    }
    ASSERT_TRUE(b.queue->nack(*lease, /*requeue=*/true, "worker w" + std::to_string(i) + " lost"));
  }
  EXPECT_EQ(b.queue->waiting(q), 2) << "the doomed task is dead";
  EXPECT_EQ(b.queue->waiting(queue::dead_letter_queue(q)), 1);

  // A coordinator restarted now must not publish the doomed trial again.
  coord.reset();  // the first one stops (and hands the experiment over)
  experiment::Coordinator restarted(*b.store, *b.queue, exp);
  EXPECT_EQ(b.queue->waiting(q), 2);

  // The other two finish normally.
  for (int i = 0; i < 2; ++i) {
    auto lease = b.queue->lease(q, "ok", 30);
    ASSERT_TRUE(lease);
    const auto id = db::decode_task(lease->payload).trial_id;
    ASSERT_NE(id, doomed);
    ASSERT_TRUE(b.store->mark_running(id, 1, "ok"));
    ASSERT_TRUE(b.store->finish_trial(id, 1, store::TrialStatus::finished, {}, ""));
    ASSERT_TRUE(b.queue->ack(*lease));
  }

  const experiment::Progress p = restarted.tick();
  auto t = b.store->trial(doomed);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->status, store::TrialStatus::failed);
  EXPECT_NE(t->error.find("the task queue gave up"), std::string::npos) << t->error;
  EXPECT_NE(t->error.find("worker w1 lost; worker w2 lost; worker w3 lost"), std::string::npos)
      << t->error;
  EXPECT_NE(t->error.find("max_attempts 3 reached"), std::string::npos) << t->error;
  EXPECT_EQ(b.queue->waiting(queue::dead_letter_queue(q)), 0);
  EXPECT_FALSE(b.queue->lease(queue::dead_letter_queue(q), "late", 10)) << "the letter was acked";
  EXPECT_EQ(b.store->events_since(0, 100).back().type, "experiment.finished");
  bool told = false;
  for (const auto& e : b.store->events_since(0, 100))
    told |= e.type == "trial.dead" && e.data["trial"] == doomed;
  EXPECT_TRUE(told);
  EXPECT_TRUE(p.done);
  EXPECT_EQ(p.counts.failed, 1);
  EXPECT_EQ(p.counts.finished, 2);
  EXPECT_EQ(b.store->experiment(exp)->status, store::ExperimentStatus::finished);
}

TEST(DeadLetters, ATrialThatEndedMeanwhileIsLeftAsItIs) {
  testing::TempDir dir;
  const std::string url = dir.url("dnnlab.db");
  auto b = experiment::open_backends(url, url);
  const auto exp = experiment::Coordinator::submit(*b.store, *b.queue, kSweep, "dead.yaml");
  const std::string q = db::queue_name(exp);
  experiment::Coordinator coord(*b.store, *b.queue, exp);
  coord.tick();
  // A worker fails its trial itself and drops the task (nack without
  // requeue): the letter still comes, and the trial keeps its own error.
  auto lease = b.queue->lease(q, "w", 30);
  ASSERT_TRUE(lease);
  const auto id = db::decode_task(lease->payload).trial_id;
  ASSERT_TRUE(b.store->mark_running(id, 1, "w"));
  ASSERT_TRUE(b.store->finish_trial(id, 1, store::TrialStatus::failed, {}, "loss diverged"));
  ASSERT_TRUE(b.queue->nack(*lease, /*requeue=*/false, "loss diverged"));
  EXPECT_EQ(b.queue->waiting(queue::dead_letter_queue(q)), 1);
  coord.tick();
  EXPECT_EQ(b.store->trial(id)->error, "loss diverged");
  EXPECT_EQ(b.queue->waiting(queue::dead_letter_queue(q)), 0);
  for (const auto& e : b.store->events_since(0, 100)) EXPECT_NE(e.type, "trial.dead");
}

}  // namespace
}  // namespace dnnlab
