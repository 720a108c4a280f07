// The AMQP backend when things break: a worker killed mid-task, the broker
// restarted mid-stream, a cancel reaching running workers through the control
// exchange, bad URLs and an unreachable broker.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <map>
#include <set>
#include <thread>

#include "../test_support.hpp"
#include "queue/amqp_task_queue.hpp"
#include "rabbitmq_server.hpp"

namespace dnnlab::queue {
namespace {

std::string unique_queue(const std::string& base) {
  static std::atomic<int> n{0};
  return base + "." + std::to_string(getpid()) + "." + std::to_string(n++);
}

// A worker process that leases one task from `queue`, reports its attempt
// through a pipe, then hangs until killed. Returns its pid and the attempt.
std::pair<pid_t, int> lease_in_child_then_hang(const std::string& url, const std::string& queue,
                                               int max_attempts) {
  int fds[2];
  if (pipe(fds) != 0) throw std::runtime_error("pipe failed");
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    int attempt = -1;
    try {
      TaskQueueOptions o;
      o.max_attempts = max_attempts;
      AmqpTaskQueue q(url, o);  // kept open: the lease dies with the process
      if (auto lease = q.lease(queue, "doomed", 60)) attempt = lease->attempt;
      (void)!write(fds[1], &attempt, sizeof attempt);
      for (;;) pause();
    } catch (...) {
    }
    (void)!write(fds[1], &attempt, sizeof attempt);
    _exit(1);
  }
  close(fds[1]);
  int attempt = -2;
  (void)!read(fds[0], &attempt, sizeof attempt);
  close(fds[0]);
  return {pid, attempt};
}

void kill_and_reap(pid_t pid) {
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
}

// The broker requeues a dead holder's message once it notices the closed TCP
// connection, which is asynchronous: on a loaded machine the next lease can
// come first. Waits (up to 20 s) until `want` messages are ready again.
bool wait_ready(AmqpTaskQueue& q, const std::string& queue, std::int64_t want) {
  for (int i = 0; i < 400; ++i) {
    if (q.waiting(queue) >= want) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

class AmqpFailure : public ::testing::Test {
 protected:
  void SetUp() override {
    url_ = testing::shared_rabbitmq_url();
    DNNLAB_REQUIRE_RABBITMQ(url_);
  }
  std::string url_;
};

TEST_F(AmqpFailure, KilledWorkerTaskIsRedeliveredExactlyOnce) {
  const std::string queue = unique_queue("killed");
  AmqpTaskQueue q(url_, {});
  q.publish_batch(queue, {"trial-1", "trial-2"});
  auto [pid, attempt] = lease_in_child_then_hang(url_, queue, 3);
  ASSERT_EQ(attempt, 1) << "the child leased trial-1 on its first delivery";
  // The survivor takes trial-2 while trial-1 is held by the doomed worker.
  auto other = q.lease(queue, "survivor", 60);
  ASSERT_TRUE(other);
  EXPECT_EQ(other->payload, "trial-2");
  EXPECT_TRUE(q.ack(*other));
  kill_and_reap(pid);  // its TCP connection closes: the broker requeues trial-1
  ASSERT_TRUE(wait_ready(q, queue, 1)) << "trial-1 was not requeued within 20 s";
  auto again = q.lease(queue, "survivor", 60);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->payload, "trial-1");
  EXPECT_EQ(again->attempt, 2) << "x-delivery-count of the quorum queue";
  EXPECT_TRUE(q.ack(*again));
  EXPECT_FALSE(q.lease(queue, "survivor", 60)) << "redelivered exactly once";
  EXPECT_EQ(q.waiting(queue), 0);
}

TEST_F(AmqpFailure, HoldersKilledMaxAttemptsTimesDeadLetterTheTask) {
  const std::string queue = unique_queue("crashy");
  TaskQueueOptions o;
  o.max_attempts = 2;
  AmqpTaskQueue q(url_, o);
  q.publish(queue, "crashy");
  for (int want = 1; want <= 2; ++want) {
    auto [pid, attempt] = lease_in_child_then_hang(url_, queue, 2);
    EXPECT_EQ(attempt, want);
    kill_and_reap(pid);
    ASSERT_TRUE(wait_ready(q, queue, 1)) << "not requeued after holder " << want << " died";
  }
  // The third delivery is past max_attempts: it goes to the dead letters.
  EXPECT_FALSE(q.lease(queue, "w", 60));
  auto letter = q.lease(dead_letter_queue(queue), "coordinator", 60);
  ASSERT_TRUE(letter);
  EXPECT_EQ(letter->payload, "crashy");
  EXPECT_EQ(letter->error, "holder lost on attempt 2 of max_attempts 2");
  EXPECT_TRUE(q.ack(*letter));
}

TEST_F(AmqpFailure, CancelReachesRunningWorkers) {
  const std::string queue = unique_queue("cancel");
  AmqpTaskQueue coordinator(url_, {});
  AmqpTaskQueue worker(url_ + "?prefetch=2", {});
  coordinator.publish_batch(queue, {"1", "2", "3", "4"});
  auto running = worker.lease(queue, "w", 60);
  ASSERT_TRUE(running);
  EXPECT_FALSE(worker.cancelled(queue));
  // 2 wait on the broker, 1 sits prefetched in the worker: the coordinator
  // drops the broker's and the worker drops its own when the cancel comes.
  EXPECT_EQ(coordinator.cancel(queue), 2);
  EXPECT_TRUE(coordinator.cancelled(queue));
  bool seen = false;
  for (int i = 0; i < 100 && !seen; ++i) {
    seen = worker.cancelled(queue);
    if (!seen) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(seen) << "the cancel did not reach the worker";
  EXPECT_FALSE(worker.cancelled(queue + ".other"));
  EXPECT_FALSE(worker.lease(queue, "w", 60)) << "the prefetched task was dropped";
  EXPECT_TRUE(worker.ack(*running)) << "the running task still settles";
  EXPECT_EQ(coordinator.waiting(queue), 0);
}

TEST_F(AmqpFailure, LeaseKeeperOnItsOwnConnectionExtendsTheHoldersLease) {
  // A worker extends its leases from a thread with its own queue object.
  const std::string queue = unique_queue("keeper");
  AmqpTaskQueue holder(url_, {});
  AmqpTaskQueue keeper(url_, {});
  holder.publish(queue, "t");
  auto lease = holder.lease(queue, "w", 60);
  ASSERT_TRUE(lease);
  TaskLease copy = *lease;
  EXPECT_TRUE(keeper.extend(copy, 60));
  EXPECT_TRUE(holder.extend(*lease, 60));
  EXPECT_TRUE(holder.ack(*lease)) << "the holder's ack is the truth";
  EXPECT_FALSE(holder.extend(*lease, 60)) << "an acked lease is not extended by its holder";
  EXPECT_FALSE(keeper.ack(copy)) << "only the holder's connection can ack";
}

// A publish the broker refuses (basic.nack) is published again until the
// queue takes it: quorum queues refuse for a moment while their leader is
// elected. Here a policy caps the queue at one message and refuses the rest
// (reject-publish; a quorum queue's cap is soft, it takes one more): five
// publishes in a row wait while the queue is full and all arrive, in order,
// once each, as a consumer makes room.
TEST_F(AmqpFailure, RefusedPublishIsPublishedAgainUntilTheQueueTakesIt) {
  const std::string queue = unique_queue("capped");
  ASSERT_EQ(testing::rabbitmq_ctl(testing::shared_rabbitmq_dir(),
                                  "set_policy --apply-to queues '" + queue + "' '^" + queue +
                                      "$' '{\"max-length\":1,\"overflow\":\"reject-publish\"}'"),
            0);
  constexpr int kMessages = 5;
  std::atomic<bool> published{false};
  std::string error;
  std::thread publisher([&] {
    try {
      AmqpTaskQueue p(url_, {});
      for (int i = 0; i < kMessages; ++i) p.publish(queue, "m" + std::to_string(i));
    } catch (const std::exception& e) {
      error = e.what();
    }
    published = true;
  });
  std::this_thread::sleep_for(std::chrono::seconds(1));
  EXPECT_FALSE(published) << "every publish returned while the queue was full: " << error;
  AmqpTaskQueue q(url_, {});
  std::vector<std::string> got;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (got.size() < kMessages && std::chrono::steady_clock::now() < give_up) {
    if (auto lease = q.lease(queue, "w", 60)) {
      got.push_back(lease->payload);
      EXPECT_TRUE(q.ack(*lease));
    } else if (published && !error.empty()) {
      break;
    }
  }
  publisher.join();
  EXPECT_EQ(error, "");
  EXPECT_EQ(got, (std::vector<std::string>{"m0", "m1", "m2", "m3", "m4"}));
  EXPECT_EQ(q.waiting(queue), 0);
  testing::rabbitmq_ctl(testing::shared_rabbitmq_dir(), "clear_policy '" + queue + "'");
}

TEST_F(AmqpFailure, ObjectUsedInAForkedChildThrowsAndSparesTheParent) {
  const std::string queue = unique_queue("fork");
  AmqpTaskQueue q(url_, {});
  q.publish(queue, "t");
  auto codes = testing::run_in_children(1, [&](int) {
    try {
      q.waiting(queue);
      return 1;
    } catch (const std::logic_error&) {
      return 0;
    }
  });
  EXPECT_EQ(codes[0], 0) << "the child used the parent's connection";
  EXPECT_EQ(q.waiting(queue), 1) << "the parent's connection still works";
}

TEST_F(AmqpFailure, BadUrlsNameTheirPart) {
  for (const std::string url :
       {"amqp://h/?prefetch=0", "amqp://h/?heartbeat=x", "amqp://h/?nope=1"}) {
    try {
      AmqpTaskQueue q(url, {});
      ADD_FAILURE() << "accepted " << url;
    } catch (const std::invalid_argument& e) {
      const std::string msg = e.what();
      const std::string part = url.substr(url.find('?') + 1, url.find('=') - url.find('?') - 1);
      EXPECT_NE(msg.find(part), std::string::npos) << msg;
    }
  }
}

TEST_F(AmqpFailure, UnreachableBrokerFailsAfterTheTimeoutWithoutThePassword) {
  TaskQueueOptions o;
  o.busy_timeout_seconds = 0.5;
  auto start = std::chrono::steady_clock::now();
  try {
    AmqpTaskQueue q("amqp://dnnlab:s3cret@127.0.0.1:1/%2f", o);
    FAIL() << "connected to port 1";
  } catch (const std::runtime_error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("amqp://dnnlab:***@127.0.0.1:1"), std::string::npos) << msg;
    EXPECT_EQ(msg.find("s3cret"), std::string::npos) << msg;
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST_F(AmqpFailure, WrongCredentialsAreRefusedByName) {
  std::string bad = url_;
  bad.replace(bad.find("guest:guest"), 11, "guest:wrong");
  TaskQueueOptions o;
  o.busy_timeout_seconds = 2;
  try {
    AmqpTaskQueue q(bad, o);
    FAIL() << "logged in with a wrong password";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("guest"), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find("wrong"), std::string::npos) << e.what();
  }
}

// A broker of its own: restarted mid-stream, durable messages survive, the
// clients reconnect, and every task is acked exactly once.
TEST(AmqpRestart, BrokerRestartedMidStreamLosesNothingDoublesNothing) {
  testing::RabbitMqServer broker;
  DNNLAB_REQUIRE_RABBITMQ(broker.installed() ? broker.url() : std::string());
  const std::string queue = "restart";
  TaskQueueOptions o;
  o.max_attempts = 5;
  o.busy_timeout_seconds = 60;  // the restart takes a few seconds
  AmqpTaskQueue producer(broker.url(), o);
  AmqpTaskQueue worker(broker.url() + "?prefetch=4", o);
  std::vector<std::string> first, second;
  for (int i = 0; i < 300; ++i) first.push_back("t" + std::to_string(i));
  for (int i = 300; i < 400; ++i) second.push_back("t" + std::to_string(i));
  producer.publish_batch(queue, first);

  std::map<std::string, int> acked;  // payload -> successful acks
  int lost_acks = 0;
  auto work = [&](int n) {
    for (int i = 0; i < n; ++i) {
      auto lease = worker.lease(queue, "w", 60);
      if (!lease) return;
      if (worker.ack(*lease))
        ++acked[lease->payload];
      else
        ++lost_acks;
    }
  };
  work(100);
  auto in_flight = worker.lease(queue, "w", 60);
  ASSERT_TRUE(in_flight);

  broker.stop();
  EXPECT_FALSE(worker.ack(*in_flight)) << "an ack on a dead connection answers false";
  broker.start();

  producer.publish_batch(queue, second);  // reconnects
  work(1000);
  EXPECT_EQ(acked.size(), 400u) << "tasks lost";
  for (const auto& [payload, n] : acked) EXPECT_EQ(n, 1) << payload << " acked twice";
  EXPECT_EQ(acked.count(in_flight->payload), 1u);
  EXPECT_EQ(lost_acks, 0);
  EXPECT_EQ(worker.waiting(queue), 0);
  EXPECT_EQ(worker.connections_opened(), 2);
  EXPECT_EQ(producer.connections_opened(), 2);
}

}  // namespace
}  // namespace dnnlab::queue
