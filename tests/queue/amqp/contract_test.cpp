// The backend-neutral part of the TaskQueue contract, run against every
// backend by URL: sqlite:PATH always, amqp:// on a private RabbitMQ
// (rabbitmq_server.hpp). Lease expiry by the clock is SQLite's alone (the
// broker redelivers on a closed connection instead): see
// tests/queue/task_queue_test.cpp and amqp_failure_test.cpp.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <memory>

#include "../test_support.hpp"
#include "queue/task_queue.hpp"
#include "rabbitmq_server.hpp"

namespace dnnlab::queue {
namespace {

class TaskQueueContract : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "amqp") {
      url_ = testing::shared_rabbitmq_url();
      DNNLAB_REQUIRE_RABBITMQ(url_);
      // prefetch: one object holds several leases of a queue in these tests.
      url_ += "?prefetch=16";
    } else {
      url_ = dir_.url("q.db");
    }
  }

  std::unique_ptr<TaskQueue> open(int max_attempts = 3) {
    TaskQueueOptions options;
    options.max_attempts = max_attempts;
    options.clock = [t = now_] { return *t; };
    return open_task_queue(url_, options);
  }

  // Queue names unique to this test and process: the broker outlives tests.
  std::string queue(const std::string& base) {
    static std::atomic<int> n{0};
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = std::string(info->name());
    for (char& c : name) c = c == '/' ? '.' : c;
    return name + "." + std::to_string(getpid()) + "." + std::to_string(n++) + "." + base;
  }

  testing::TempDir dir_;
  std::string url_;
  std::shared_ptr<double> now_ = std::make_shared<double>(1'000'000.0);
};

TEST_P(TaskQueueContract, LeasesInPublishOrder) {
  auto q = open();
  const std::string exp = queue("exp");
  auto ids = q->publish_batch(exp, {"a", "b", "c"});
  ASSERT_EQ(ids.size(), 3u);
  EXPECT_LT(ids[0], ids[1]);
  auto d = q->publish(exp, "d");
  EXPECT_GT(d, ids.back());
  for (const char* want : {"a", "b", "c", "d"}) {
    auto lease = q->lease(exp, "w1", 30);
    ASSERT_TRUE(lease) << want;
    EXPECT_EQ(lease->payload, want);
    EXPECT_EQ(lease->attempt, 1);
    EXPECT_EQ(lease->worker_id, "w1");
    EXPECT_EQ(lease->queue, exp);
    EXPECT_DOUBLE_EQ(lease->deadline, *now_ + 30);
  }
  EXPECT_FALSE(q->lease(exp, "w1", 30));
}

TEST_P(TaskQueueContract, QueuesAreSeparate) {
  auto q = open();
  const std::string a = queue("a"), b = queue("b");
  q->publish(a, "from-a");
  q->publish(b, "from-b");
  EXPECT_EQ(q->lease(b, "w", 5)->payload, "from-b");
  EXPECT_EQ(q->lease(a, "w", 5)->payload, "from-a");
  EXPECT_FALSE(q->lease(a, "w", 5));
}

TEST_P(TaskQueueContract, PayloadIsOpaqueBytes) {
  auto q = open();
  const std::string exp = queue("exp");
  std::string payload("x\0y\xff", 4);
  payload += std::string(200'000, 'z');  // larger than one AMQP frame
  q->publish(exp, payload);
  EXPECT_EQ(q->lease(exp, "w", 5)->payload, payload);
}

TEST_P(TaskQueueContract, AckedTaskIsNeverDeliveredAgain) {
  auto q = open();
  const std::string exp = queue("exp");
  q->publish(exp, "t");
  auto lease = q->lease(exp, "w1", 10);
  ASSERT_TRUE(lease);
  EXPECT_TRUE(q->extend(*lease, 20));
  EXPECT_DOUBLE_EQ(lease->deadline, *now_ + 20);
  EXPECT_TRUE(q->ack(*lease));
  EXPECT_FALSE(q->ack(*lease)) << "acked twice";
  EXPECT_FALSE(q->extend(*lease, 10)) << "an acked lease cannot be extended";
  EXPECT_FALSE(q->lease(exp, "w2", 10));
  EXPECT_EQ(q->waiting(exp), 0);
}

// ack_batch acks exactly the leases it is given, with one commit: leases
// held below the newest of them (a trial still running) and tasks
// prefetched but not leased stay unacked (on AMQP a multiple-ack would take
// them too; acking one of them again afterwards would then fail).
TEST_P(TaskQueueContract, AckBatchAcksExactlyTheGivenLeases) {
  const std::string exp = queue("exp");
  {
    auto q = open();
    q->publish_batch(exp, {"0", "1", "2", "3", "4", "5"});
    std::vector<TaskLease> l;
    for (int i = 0; i < 4; ++i) {
      auto lease = q->lease(exp, "w", 10);
      ASSERT_TRUE(lease) << i;
      EXPECT_EQ(lease->payload, std::to_string(i));
      l.push_back(*lease);
    }
    EXPECT_TRUE(q->ack_batch({}).empty());
    EXPECT_EQ(q->ack_batch({l[1], l[3]}), (std::vector<bool>{true, true}));
    EXPECT_EQ(q->ack_batch({l[0], l[1]}), (std::vector<bool>{true, false})) << "l1 acked twice";
    EXPECT_TRUE(q->ack(l[2])) << "a lease below the batch's newest must stay unacked";
    std::vector<TaskLease> rest;
    for (const char* want : {"4", "5"}) {
      auto lease = q->lease(exp, "w", 10);
      ASSERT_TRUE(lease) << want << " was acked by a batch that did not name it";
      EXPECT_EQ(lease->payload, want);
      rest.push_back(*lease);
    }
    EXPECT_EQ(q->ack_batch(rest), (std::vector<bool>{true, true}));
    EXPECT_FALSE(q->lease(exp, "w", 10));
  }
  // Nothing left unacked: a new connection finds the queue empty (on AMQP
  // the broker would have requeued any delivery the first one still held).
  auto q2 = open();
  EXPECT_FALSE(q2->lease(exp, "w2", 10));
  EXPECT_EQ(q2->waiting(exp), 0);
}

TEST_P(TaskQueueContract, NackRequeueCarriesAttemptAndErrorThenDeadLetter) {
  auto q = open();
  const std::string exp = queue("exp");
  q->publish(exp, "a");
  auto a = q->lease(exp, "w", 10);
  ASSERT_TRUE(a);
  ASSERT_TRUE(q->nack(*a, /*requeue=*/true, "worker shutting down"));
  auto again = q->lease(exp, "w", 10);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->payload, "a");
  EXPECT_EQ(again->attempt, 2);
  EXPECT_FALSE(q->nack(*a, true, "stale")) << "old lease cannot nack";
  EXPECT_FALSE(q->ack(*a)) << "old lease cannot ack";
  ASSERT_TRUE(q->nack(*again, /*requeue=*/false, "bad config"));
  EXPECT_FALSE(q->lease(exp, "w", 10));
  EXPECT_EQ(q->waiting(exp), 0);
  EXPECT_EQ(q->waiting(dead_letter_queue(exp)), 1);
  // The dead task went on to the dead-letter queue with why it died.
  auto letter = q->lease(dead_letter_queue(exp), "coordinator", 10);
  ASSERT_TRUE(letter);
  EXPECT_EQ(letter->payload, "a");
  EXPECT_EQ(letter->error, "worker shutting down; bad config");
  EXPECT_EQ(letter->attempt, 1);
  EXPECT_TRUE(q->ack(*letter));
  EXPECT_FALSE(q->lease(dead_letter_queue(exp), "coordinator", 10));
}

TEST_P(TaskQueueContract, MaxAttemptsByNackSendsToDead) {
  auto q = open(/*max_attempts=*/2);
  const std::string exp = queue("exp");
  q->publish(exp, "nacky");
  auto l1 = q->lease(exp, "w", 10);
  ASSERT_TRUE(l1);
  ASSERT_TRUE(q->nack(*l1, true, "oom"));
  auto l2 = q->lease(exp, "w", 10);
  ASSERT_TRUE(l2);
  EXPECT_EQ(l2->attempt, 2);
  ASSERT_TRUE(q->nack(*l2, true, "oom again"));
  EXPECT_FALSE(q->lease(exp, "w", 10));
  auto d = q->lease(dead_letter_queue(exp), "coordinator", 10);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->payload, "nacky");
  EXPECT_EQ(d->error, "oom; oom again; max_attempts 2 reached");
  EXPECT_EQ(d->attempt, 1);  // a letter's own delivery count
}

TEST_P(TaskQueueContract, WaitingAndCancel) {
  auto q = open();
  const std::string exp = queue("exp");
  q->publish_batch(exp, {"1", "2", "3", "4", "5"});
  EXPECT_EQ(q->waiting(exp), 5);
  auto l1 = q->lease(exp, "w", 10);
  auto l2 = q->lease(exp, "w", 10);
  ASSERT_TRUE(l1 && l2);
  EXPECT_TRUE(q->ack(*l1));
  EXPECT_EQ(q->waiting(exp), 3) << "leased and done tasks do not wait";
  EXPECT_EQ(q->cancel(exp), 3);
  EXPECT_FALSE(q->lease(exp, "w", 10));
  EXPECT_TRUE(q->ack(*l2)) << "a running task finishes after cancel";
  EXPECT_EQ(q->waiting(exp), 0);
  EXPECT_EQ(q->waiting(queue("other")), 0);
}

TEST_P(TaskQueueContract, BadArgumentsNameTheField) {
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
  expect_field([&] { open_task_queue(GetParam() == "amqp" ? url_ : dir_.url("q2.db"), bad); },
               "max_attempts");
}

INSTANTIATE_TEST_SUITE_P(Backends, TaskQueueContract, ::testing::Values("sqlite", "amqp"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace dnnlab::queue
