// TaskQueue semantics by backend URL: FIFO, lease expiry and redelivery,
// extend, nack, max attempts, waiting, cancel. The backends are the values of
// INSTANTIATE_TEST_SUITE_P below (sqlite: always; a server backend adds its
// name there and its URL in testing::queue_url). Lease expiry is driven by
// TaskQueueOptions::clock, which the embedded backend honours.
#include "queue/task_queue.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include "test_support.hpp"

namespace dnnlab::queue {
namespace {

class TaskQueueTest : public ::testing::TestWithParam<std::string> {
 protected:
  std::unique_ptr<TaskQueue> open(int max_attempts = 3) {
    TaskQueueOptions options;
    options.max_attempts = max_attempts;
    options.clock = [t = now_] { return *t; };
    return open_task_queue(testing::queue_url(GetParam(), dir_), options);
  }
  void advance(double seconds) { *now_ += seconds; }

  testing::TempDir dir_;
  std::shared_ptr<double> now_ = std::make_shared<double>(1'000'000.0);
};
INSTANTIATE_TEST_SUITE_P(Backends, TaskQueueTest, ::testing::Values("sqlite"),
                         [](const auto& info) { return info.param; });

TEST_P(TaskQueueTest, LeasesInPublishOrder) {
  auto q = open();
  auto ids = q->publish_batch("exp", {"a", "b", "c"});
  ASSERT_EQ(ids.size(), 3u);
  auto d = q->publish("exp", "d");
  EXPECT_GT(d, ids.back());
  for (const char* want : {"a", "b", "c", "d"}) {
    auto lease = q->lease("exp", "w1", 30);
    ASSERT_TRUE(lease);
    EXPECT_EQ(lease->payload, want);
    EXPECT_EQ(lease->attempt, 1);
    EXPECT_EQ(lease->worker_id, "w1");
    EXPECT_DOUBLE_EQ(lease->deadline, *now_ + 30);
  }
  EXPECT_FALSE(q->lease("exp", "w1", 30));
}

TEST_P(TaskQueueTest, QueuesAreSeparate) {
  auto q = open();
  q->publish("a", "from-a");
  q->publish("b", "from-b");
  EXPECT_EQ(q->lease("b", "w", 5)->payload, "from-b");
  EXPECT_EQ(q->lease("a", "w", 5)->payload, "from-a");
  EXPECT_FALSE(q->lease("a", "w", 5));
}

TEST_P(TaskQueueTest, PayloadIsOpaqueBytes) {
  auto q = open();
  std::string payload("x\0y\xff", 4);
  q->publish("exp", payload);
  EXPECT_EQ(q->lease("exp", "w", 5)->payload, payload);
}

TEST_P(TaskQueueTest, ExpiredLeaseIsRedeliveredAndOldAckFails) {
  auto q = open();
  q->publish("exp", "t");
  auto first = q->lease("exp", "w1", 10);
  ASSERT_TRUE(first);
  advance(5);
  EXPECT_FALSE(q->lease("exp", "w2", 10)) << "lease still valid";
  advance(6);
  auto second = q->lease("exp", "w2", 10);
  ASSERT_TRUE(second);
  EXPECT_EQ(second->task_id, first->task_id);
  EXPECT_EQ(second->attempt, 2);
  EXPECT_FALSE(q->ack(*first));
  EXPECT_FALSE(q->extend(*first, 10));
  EXPECT_TRUE(q->ack(*second));
  EXPECT_FALSE(q->ack(*second)) << "acked twice";
  EXPECT_EQ(q->waiting("exp"), 0);
  advance(60);
  EXPECT_FALSE(q->lease("exp", "w3", 10)) << "an acked task is never delivered again";
}

TEST_P(TaskQueueTest, ExpiredButNotRedeliveredLeaseCanStillAck) {
  auto q = open();
  q->publish("exp", "t");
  auto lease = q->lease("exp", "w1", 1);
  advance(5);
  EXPECT_TRUE(q->ack(*lease));
  EXPECT_FALSE(q->lease("exp", "w2", 1));
}

TEST_P(TaskQueueTest, ExtendKeepsTheLease) {
  auto q = open();
  q->publish("exp", "t");
  auto lease = q->lease("exp", "w1", 10);
  advance(8);
  ASSERT_TRUE(q->extend(*lease, 10));
  EXPECT_DOUBLE_EQ(lease->deadline, *now_ + 10);
  advance(8);  // 16 s after the lease, 8 s after the extension
  EXPECT_FALSE(q->lease("exp", "w2", 10));
  advance(3);
  auto other = q->lease("exp", "w2", 10);
  ASSERT_TRUE(other);
  EXPECT_FALSE(q->extend(*lease, 10)) << "lost lease must not be extended";
  EXPECT_TRUE(q->extend(*other, 10));
}

TEST_P(TaskQueueTest, NackRequeueAndDeadLetter) {
  auto q = open();
  q->publish_batch("exp", {"a", "b"});
  auto a = q->lease("exp", "w", 10);
  ASSERT_TRUE(q->nack(*a, /*requeue=*/true, "worker shutting down"));
  auto again = q->lease("exp", "w", 10);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->task_id, a->task_id) << "requeued task keeps its place";
  EXPECT_EQ(again->attempt, 2);
  EXPECT_FALSE(q->nack(*a, true, "stale")) << "old lease cannot nack";
  ASSERT_TRUE(q->nack(*again, /*requeue=*/false, "bad config"));
  auto b = q->lease("exp", "w", 10);
  EXPECT_EQ(b->payload, "b");
  EXPECT_EQ(q->waiting("exp"), 0) << "b is leased, a is dead: nothing waits";
  EXPECT_EQ(q->waiting("exp.dead"), 1);
  // The dead task went on to the dead-letter queue with why it died.
  ASSERT_EQ(dead_letter_queue("exp"), "exp.dead");
  auto letter = q->lease("exp.dead", "coordinator", 10);
  ASSERT_TRUE(letter);
  EXPECT_EQ(letter->payload, "a");
  EXPECT_EQ(letter->error, "worker shutting down; bad config");
  EXPECT_TRUE(q->ack(*letter));
  EXPECT_FALSE(q->lease("exp.dead", "coordinator", 10));
}

TEST_P(TaskQueueTest, MaxAttemptsSendsToDead) {
  auto q = open(/*max_attempts=*/2);
  q->publish_batch("exp", {"crashy", "nacky"});
  auto l1 = q->lease("exp", "w", 10);
  EXPECT_EQ(l1->payload, "crashy");
  advance(11);
  auto l2 = q->lease("exp", "w", 10);
  EXPECT_EQ(l2->payload, "crashy");
  EXPECT_EQ(l2->attempt, 2);
  advance(11);
  // crashy expired on its last attempt: dead, and the next task comes instead.
  auto l3 = q->lease("exp", "w", 10);
  EXPECT_EQ(l3->payload, "nacky");
  ASSERT_TRUE(q->nack(*l3, true, "oom"));
  auto l4 = q->lease("exp", "w", 10);
  ASSERT_TRUE(l4);
  EXPECT_EQ(l4->attempt, 2);
  ASSERT_TRUE(q->nack(*l4, true, "oom again"));
  EXPECT_FALSE(q->lease("exp", "w", 10));
  EXPECT_EQ(q->waiting("exp"), 0);
  // Both died by max attempts, each sent on with its reasons, in order.
  EXPECT_EQ(q->waiting("exp.dead"), 2);
  auto d1 = q->lease("exp.dead", "coordinator", 10);
  auto d2 = q->lease("exp.dead", "coordinator", 10);
  ASSERT_TRUE(d1 && d2);
  EXPECT_EQ(d1->payload, "crashy");
  EXPECT_EQ(d1->error, "lease expired on attempt 2 of max_attempts 2");
  EXPECT_EQ(d2->payload, "nacky");
  EXPECT_EQ(d2->error, "oom; oom again; max_attempts 2 reached");
  EXPECT_EQ(d2->attempt, 1);  // a letter's own delivery count
}

TEST_P(TaskQueueTest, WaitingAndCancel) {
  auto q = open();
  q->publish_batch("exp", {"1", "2", "3", "4", "5"});
  EXPECT_EQ(q->waiting("exp"), 5);
  auto l1 = q->lease("exp", "w", 10);
  auto l2 = q->lease("exp", "w", 10);
  q->ack(*l1);
  EXPECT_EQ(q->waiting("exp"), 3) << "leased and done tasks do not wait";
  EXPECT_EQ(q->waiting("exp.dead"), 0);
  EXPECT_EQ(q->cancel("exp"), 3);
  EXPECT_FALSE(q->lease("exp", "w", 10));
  EXPECT_TRUE(q->ack(*l2)) << "a running task finishes after cancel";
  EXPECT_EQ(q->waiting("exp"), 0);
  EXPECT_EQ(q->waiting("other"), 0);
}

TEST_P(TaskQueueTest, BadArgumentsNameTheField) {
  auto q = open();
  auto expect_field = [](auto&& call, const std::string& field) {
    try {
      call();
      ADD_FAILURE() << "no exception for " << field;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
  };
  expect_field([&] { q->publish("", "x"); }, "queue");
  expect_field([&] { q->lease("exp", "", 10); }, "worker_id");
  expect_field([&] { q->lease("exp", "w", 0); }, "lease_seconds");
  expect_field([&] { q->lease("exp", "w", std::nan("")); }, "lease_seconds");
  TaskLease fake;
  fake.task_id = 12345;
  fake.worker_id = "w";
  fake.attempt = 1;
  expect_field([&] { q->extend(fake, -1); }, "seconds");
  EXPECT_FALSE(q->ack(fake));
  EXPECT_FALSE(q->nack(fake, true, ""));
  TaskQueueOptions bad;
  bad.max_attempts = 0;
  expect_field([&] { open_task_queue(dir_.url("q2.db"), bad); }, "max_attempts");
}

}  // namespace
}  // namespace dnnlab::queue
