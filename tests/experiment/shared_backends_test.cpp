// A queue and a store opened together on one embedded file share a
// connection: queue.write_together() commits the writes of both at once, or
// (on an exception) neither. On separate files each write commits by itself.
#include <gtest/gtest.h>

#include <stdexcept>

#include "db/connections.hpp"
#include "queue/task_queue.hpp"
#include "queue/test_support.hpp"
#include "store/result_store.hpp"

namespace dnnlab {
namespace {

struct Opened {
  std::unique_ptr<queue::TaskQueue> queue;
  std::unique_ptr<store::ResultStore> store;
  std::int64_t trial = 0;
};

Opened open(const std::string& queue_url, const std::string& store_url) {
  Opened s;
  db::Connections shared;  // one connection when both URLs name one file
  s.queue = queue::open_task_queue(queue_url, {}, &shared);
  s.store = store::open_result_store(store_url, &shared);
  store::ExperimentRecord e;
  e.name = "shared";
  auto exp = s.store->create_experiment(e);
  s.trial = s.store->add_trials(exp, {{0, "{}", 1}}).at(0);
  s.queue->publish("q", std::to_string(s.trial));
  return s;
}

TEST(SharedBackends, WriteTogetherCommitsBothOrNeither) {
  testing::TempDir dir;
  const std::string url = dir.url("one.db");
  Opened s = open(url, url);
  EXPECT_THROW(s.queue->write_together([&] {
    auto lease = s.queue->lease("q", "w1", 30);
    ASSERT_TRUE(lease);
    ASSERT_TRUE(s.store->mark_running(s.trial, lease->attempt, "w1"));
    throw std::runtime_error("worker failed half way");
  }),
               std::runtime_error);
  // Fresh connections see neither the lease nor the running trial.
  auto other_queue = queue::open_task_queue(url);
  auto other_store = store::open_result_store(url);
  EXPECT_EQ(other_queue->waiting("q"), 1);
  EXPECT_EQ(other_store->trial(s.trial)->status, store::TrialStatus::queued);

  std::optional<queue::TaskLease> lease;
  s.queue->write_together([&] {
    lease = s.queue->lease("q", "w1", 30);
    ASSERT_TRUE(lease);
    EXPECT_EQ(lease->attempt, 1) << "the rolled-back delivery does not count";
    ASSERT_TRUE(s.store->mark_running(s.trial, lease->attempt, "w1"));
  });
  EXPECT_EQ(other_queue->waiting("q"), 0) << "leased";
  EXPECT_EQ(other_store->trial(s.trial)->status, store::TrialStatus::running);

  s.queue->write_together([&] {
    store::TrialMetrics m;
    m.val_acc = 0.5;
    EXPECT_TRUE(s.store->finish_trial(s.trial, 1, store::TrialStatus::finished, m));
    EXPECT_TRUE(s.queue->ack(*lease));
    // Nested: a savepoint inside the outer transaction.
    s.queue->write_together([&] { s.queue->publish("q", "next"); });
  });
  EXPECT_EQ(other_queue->waiting("q"), 1);
  auto next = other_queue->lease("q", "w2", 30);
  ASSERT_TRUE(next);
  EXPECT_EQ(next->payload, "next") << "the acked task is not delivered again";
  EXPECT_EQ(other_store->trial_counts(1).finished, 1);
}

TEST(SharedBackends, AFailedInnerTransactionUndoesOnlyItsOwnWrites) {
  testing::TempDir dir;
  const std::string url = dir.url("one.db");
  Opened s = open(url, url);
  s.queue->write_together([&] {
    ASSERT_TRUE(s.store->mark_running(s.trial, 1, "w1"));
    // add_trials is all or nothing, also inside an outer transaction.
    EXPECT_THROW(s.store->add_trials(1, {{1, "{}", 2}, {0, "{}", 3}}), std::invalid_argument);
  });
  auto other_store = store::open_result_store(url);
  EXPECT_EQ(other_store->trial(s.trial)->status, store::TrialStatus::running);
  EXPECT_EQ(other_store->trial_counts(1).total(), 1) << "trial index 1 was rolled back";
}

TEST(SharedBackends, SeparateFilesCommitEachWriteByItself) {
  testing::TempDir dir;
  Opened s = open(dir.url("queue.db"), dir.url("store.db"));
  EXPECT_THROW(s.queue->write_together([&] {
    ASSERT_TRUE(s.store->mark_running(s.trial, 1, "w1"));
    throw std::runtime_error("stop");
  }),
               std::runtime_error);
  EXPECT_EQ(store::open_result_store(dir.url("store.db"))->trial(s.trial)->status,
            store::TrialStatus::running)
      << "the store's write was not part of the queue's transaction";
}

TEST(SharedBackends, SeparatelyOpenedOnOneFileDoNotWaitForEachOther) {
  testing::TempDir dir;
  const std::string url = dir.url("one.db");
  auto queue = queue::open_task_queue(url, {.busy_timeout_seconds = 2});
  auto store = store::open_result_store(url);  // its own connection, as in the server
  store::ExperimentRecord e;
  e.name = "separate";
  const auto exp = store->create_experiment(e);
  queue->write_together([&] {
    auto ids = store->add_trials(exp, {{0, "{}", 1}});
    queue->publish("q", std::to_string(ids.at(0)));
  });
  EXPECT_EQ(store->trial_counts(exp).queued, 1);
  EXPECT_EQ(queue->waiting("q"), 1);
}

}  // namespace
}  // namespace dnnlab
