// AmqpTaskQueue::want_prefetch: the consumer's prefetch moves while it
// consumes (RabbitMQ applies basic.qos only to consumers started after it,
// so the consumer is started again), deliveries that arrive while that
// happens are neither lost nor stuck, and a lowered prefetch gives back
// what the consumer held beyond it, at the same attempt.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "../test_support.hpp"
#include "queue/amqp_task_queue.hpp"
#include "rabbitmq_server.hpp"

namespace dnnlab::queue {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

std::string prefetch_queue(const std::string& base) {
  static std::atomic<int> n{0};
  return base + "." + std::to_string(getpid()) + "." + std::to_string(n++);
}

std::vector<std::string> numbered_tasks(int n) {
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) out.push_back("task-" + std::to_string(i));
  return out;
}

// Leases until the queue gives nothing within a few tries; returns the leases.
std::vector<TaskLease> lease_all_of(AmqpTaskQueue& q, const std::string& queue, int most) {
  std::vector<TaskLease> out;
  for (int misses = 0; misses < 3 && static_cast<int>(out.size()) < most;) {
    if (auto l = q.lease(queue, "w", 60))
      out.push_back(std::move(*l));
    else
      ++misses;
  }
  return out;
}

class AmqpPrefetch : public ::testing::Test {
 protected:
  void SetUp() override {
    url_ = testing::shared_rabbitmq_url();
    DNNLAB_REQUIRE_RABBITMQ(url_);
  }
  std::string url_;
};

TEST_F(AmqpPrefetch, UrlBoundsAreChecked) {
  EXPECT_THROW(AmqpUrl::parse("amqp://h/%2f?prefetch=8&prefetch_max=4"), std::invalid_argument);
  EXPECT_THROW(AmqpUrl::parse("amqp://h/%2f?prefetch_max=0"), std::invalid_argument);
  EXPECT_EQ(AmqpUrl::parse("amqp://h/%2f?prefetch=2").prefetch_max, 32);
  EXPECT_EQ(AmqpUrl::parse("amqp://h/%2f?prefetch=40").prefetch_max, 40);
  EXPECT_EQ(AmqpUrl::parse("amqp://h/%2f?prefetch=2&prefetch_max=2").prefetch_max, 2);
  AmqpTaskQueue q(url_ + "?prefetch=2", {});
  EXPECT_THROW(q.want_prefetch("x", 0), std::invalid_argument);
}

// At prefetch 2 a consumer gets two deliveries and no third until it acks;
// after want_prefetch(64), bounded by the URL to 8, it holds eight, none
// acked, each task once at attempt 1.
TEST_F(AmqpPrefetch, RaisingItLetsTheConsumerHoldMore) {
  const std::string queue = prefetch_queue("raise");
  AmqpTaskQueue coordinator(url_, {});
  coordinator.publish_batch(queue, numbered_tasks(20));
  AmqpTaskQueue q(url_ + "?prefetch=2&prefetch_max=8", {});
  auto held = lease_all_of(q, queue, 20);
  EXPECT_EQ(held.size(), 2u) << "prefetch 2: the broker pushes nothing more until an ack";
  EXPECT_EQ(q.consumer_prefetch(queue), 2);
  q.want_prefetch(queue, 64);  // clamped to prefetch_max
  EXPECT_EQ(q.consumer_prefetch(queue), 8);
  auto more = lease_all_of(q, queue, 20);
  EXPECT_EQ(held.size() + more.size(), 8u) << "8 held at once, none acked";
  EXPECT_EQ(q.connections_opened(), 1);
  held.insert(held.end(), more.begin(), more.end());
  std::set<std::string> seen;
  for (const auto& l : held) {
    EXPECT_TRUE(seen.insert(l.payload).second) << l.payload << " twice";
    EXPECT_EQ(l.attempt, 1);
  }
  EXPECT_EQ(q.ack_batch(held), std::vector<bool>(held.size(), true));
  while (auto l = q.lease(queue, "w", 60)) {
    EXPECT_TRUE(seen.insert(l->payload).second) << l->payload << " twice";
    EXPECT_EQ(l->attempt, 1);
    EXPECT_TRUE(q.ack(*l));
  }
  EXPECT_EQ(seen.size(), 20u);
  EXPECT_EQ(q.waiting(queue), 0);
}

// The hang case: the broker has pushed deliveries this object has not read
// when the prefetch changes, so they arrive while rabbitmq-c waits for the
// consumer's cancel-ok. They must reach the inbox and be leased, once.
TEST_F(AmqpPrefetch, DeliveriesArrivingDuringTheChangeAreLeasedOnce) {
  const std::string queue = prefetch_queue("inflight");
  AmqpTaskQueue coordinator(url_, {});
  coordinator.publish_batch(queue, numbered_tasks(10));
  AmqpTaskQueue q(url_ + "?prefetch=4", {});
  auto first = q.lease(queue, "w", 60);
  ASSERT_TRUE(first);
  // Three more deliveries are on their way or in the socket, unread.
  std::this_thread::sleep_for(200ms);
  q.want_prefetch(queue, 16);
  EXPECT_EQ(q.consumer_prefetch(queue), 16);
  std::vector<TaskLease> held{*first};
  const auto give_up = Clock::now() + 20s;
  while (held.size() < 10 && Clock::now() < give_up)
    if (auto l = q.lease(queue, "w", 60)) held.push_back(std::move(*l));
  ASSERT_EQ(held.size(), 10u) << "deliveries got stuck across the prefetch change";
  std::set<std::string> seen;
  for (const auto& l : held) {
    EXPECT_TRUE(seen.insert(l.payload).second) << l.payload << " twice";
    EXPECT_EQ(l.attempt, 1);
  }
  EXPECT_EQ(q.ack_batch(held), std::vector<bool>(10, true));
  EXPECT_FALSE(q.lease(queue, "w", 60));
  EXPECT_EQ(q.waiting(queue), 0);
}

// Lowering: the deliveries held beyond the new prefetch go back to the
// queue (at attempt 1 still), where another worker leases them.
TEST_F(AmqpPrefetch, LoweringItGivesBackWhatIsHeldBeyond) {
  const std::string queue = prefetch_queue("lower");
  AmqpTaskQueue coordinator(url_, {});
  coordinator.publish_batch(queue, numbered_tasks(16));
  AmqpTaskQueue hoarder(url_ + "?prefetch=2", {});
  hoarder.want_prefetch(queue, 16);  // before consuming: the first consumer takes it
  auto running = hoarder.lease(queue, "hoarder", 60);
  ASSERT_TRUE(running);
  EXPECT_EQ(hoarder.consumer_prefetch(queue), 16);
  std::this_thread::sleep_for(200ms);  // the other 15 reach the hoarder
  EXPECT_EQ(coordinator.waiting(queue), 0) << "all 16 pushed to the hoarder";
  hoarder.want_prefetch(queue, 2);  // its extra consumer (14, all here) is cancelled
  EXPECT_EQ(hoarder.consumer_prefetch(queue), 2);
  AmqpTaskQueue other(url_ + "?prefetch=16", {});
  auto theirs = lease_all_of(other, queue, 16);
  EXPECT_GE(theirs.size(), 13u) << "the hoarder gave back what it held beyond 2";
  EXPECT_EQ(hoarder.connections_opened(), 1);
  std::map<std::string, int> count;
  for (const auto& l : theirs) {
    ++count[l.payload];
    EXPECT_EQ(l.attempt, 1) << "a given-back task is not a failed attempt";
  }
  EXPECT_EQ(other.ack_batch(theirs), std::vector<bool>(theirs.size(), true));
  ++count[running->payload];
  EXPECT_TRUE(hoarder.ack(*running));
  auto mine = lease_all_of(hoarder, queue, 16);
  for (const auto& l : mine) ++count[l.payload];
  EXPECT_EQ(hoarder.ack_batch(mine), std::vector<bool>(mine.size(), true));
  EXPECT_EQ(count.size(), 16u);
  for (const auto& [payload, n] : count) EXPECT_EQ(n, 1) << payload;
  EXPECT_EQ(coordinator.waiting(queue), 0);
}

// Two consumers lease and ack 400 tasks while each keeps moving its
// prefetch (up, down: giving back, up again) right after its acks, when the
// broker's next pushes are in flight. Every task is acked exactly once, at
// attempt 1, and nothing is left: no delivery lost or stuck.
// Both consume until all 400 are acked. (They used to stop after five
// empty leases in a row, which failed once in CI: one consumer's five came
// while the other gave deliveries back, the broker pushed some of them to
// the first just before it closed its connection, and a quorum queue counts
// deliveries returned by a closed connection as failed attempts.)
TEST_F(AmqpPrefetch, ChangingItUnderLoadLosesNothing) {
  constexpr int kTasks = 400;
  const std::string queue = prefetch_queue("churn");
  AmqpTaskQueue coordinator(url_, {});
  coordinator.publish_batch(queue, numbered_tasks(kTasks));
  std::mutex mu;
  std::map<std::string, int> acked;
  std::atomic<int> acked_total{0};
  std::atomic<int> bad_attempts{0};
  std::atomic<int> timed_out{0};
  auto consume = [&](int seed) {
    AmqpTaskQueue q(url_ + "?prefetch=2", {});
    const int levels[] = {2, 16, 4, 32, 1, 8};
    int step = seed;
    // About 0.1 s quiet; the bound only turns a stuck delivery into a failure.
    const auto give_up = Clock::now() + 120s;
    while (acked_total < kTasks) {
      if (Clock::now() > give_up) {
        ++timed_out;
        break;
      }
      std::vector<TaskLease> batch;
      while (batch.size() < 5)
        if (auto l = q.lease(queue, "w" + std::to_string(seed), 60))
          batch.push_back(std::move(*l));
        else
          break;
      if (batch.empty()) continue;
      for (const auto& l : batch) bad_attempts += l.attempt != 1;
      const auto ok = q.ack_batch(batch);
      {
        std::lock_guard lock(mu);
        for (std::size_t i = 0; i < batch.size(); ++i)
          if (ok[i]) {
            ++acked[batch[i].payload];
            ++acked_total;
          }
      }
      q.want_prefetch(queue, levels[step++ % 6]);  // right after the acks
    }
    EXPECT_EQ(q.connections_opened(), 1);
  };
  std::thread a(consume, 0), b(consume, 3);
  a.join();
  b.join();
  EXPECT_EQ(timed_out.load(), 0) << "tasks still missing after 120 s: " << acked.size() << " of "
                                 << kTasks << " acked";
  EXPECT_EQ(acked.size(), static_cast<std::size_t>(kTasks));
  for (const auto& [payload, n] : acked) EXPECT_EQ(n, 1) << payload;
  EXPECT_EQ(bad_attempts.load(), 0);
  EXPECT_EQ(coordinator.waiting(queue), 0);
}

// A consumer that ends (its object destroyed: a worker stopping) gives
// back what the broker pushed to it and it never leased, at the attempt it
// came with; a closed connection would return it counted as an attempt.
// What it leased and did not ack comes back as a failed attempt (2).
TEST_F(AmqpPrefetch, ClosingGivesBackWhatWasPushedButNotLeased) {
  const std::string queue = prefetch_queue("close");
  AmqpTaskQueue coordinator(url_, {});
  coordinator.publish_batch(queue, numbered_tasks(3));
  std::string leased;
  {
    AmqpTaskQueue q(url_ + "?prefetch=3", {});
    auto l = q.lease(queue, "w", 60);
    ASSERT_TRUE(l);
    leased = l->payload;
    std::this_thread::sleep_for(200ms);  // the other two reach its inbox
    EXPECT_EQ(coordinator.waiting(queue), 0) << "all three pushed to the consumer";
  }
  AmqpTaskQueue other(url_ + "?prefetch=3", {});
  auto got = lease_all_of(other, queue, 3);
  ASSERT_EQ(got.size(), 3u);
  std::set<std::string> seen;
  for (const auto& l : got) {
    EXPECT_TRUE(seen.insert(l.payload).second) << l.payload << " twice";
    EXPECT_EQ(l.attempt, l.payload == leased ? 2 : 1) << l.payload;
  }
  EXPECT_EQ(other.ack_batch(got), std::vector<bool>(3, true));
  EXPECT_EQ(coordinator.waiting(queue), 0);
}

}  // namespace
}  // namespace dnnlab::queue
