// The cluster TaskQueue: tasks are persistent messages in durable RabbitMQ
// quorum queues, leased by manual-ack consumers (rabbitmq-c, AMQP 0-9-1).
//
//   AmqpTaskQueue q("amqp://user:pass@rabbit:5672/%2f?prefetch=4", {});
//   q.publish_batch("exp-7", payloads);      // waits for the broker's confirms
//   while (auto lease = q.lease("exp-7", "w1", 60)) {
//     if (q.cancelled("exp-7")) { q.nack(*lease, false, "cancelled"); break; }
//     ... run the trial ...
//     if (!q.ack(*lease)) { /* connection lost: RabbitMQ redelivers it */ }
//   }
//
// How the TaskQueue contract maps onto the broker:
// - Queues are durable quorum queues (x-queue-type=quorum): messages survive a
//   broker restart, and the broker counts deliveries exactly (the
//   x-delivery-count header), which a classic queue's `redelivered` flag does
//   not. attempt = 1 + x-dnnlab-attempts (header, set when this backend
//   republishes on nack) + x-delivery-count (redeliveries by the broker when a
//   holder's connection closed). A delivery past max_attempts is not handed
//   out: it goes to dead_letter_queue(queue) with its error and the next one
//   comes instead.
// - Publishing uses publisher confirms: publish_batch returns when the broker
//   has every message on disk. After a connection loss the unconfirmed
//   messages are published again (at least once, as the contract allows).
// - The consuming channel is transactional (tx.select): ack is basic.ack +
//   tx.commit, so `true` means the broker took it; on a lost connection ack
//   answers false and the broker redelivers the task. nack republishes the
//   message with attempt and error headers and acks the original in one
//   transaction, so the task is neither lost nor doubled in between.
//   ack_batch acks many deliveries in one transaction: one basic.ack with
//   `multiple` when they are every outstanding delivery up to the newest of
//   them (nothing prefetched or still running lies in between), one
//   basic.ack each otherwise, and one tx.commit either way.
// - Prefetch (basic.qos, per consumer) starts at the URL's `prefetch=N`,
//   default 1: `dnnlab worker` gives each slot (one process) prefetch=2
//   unless the URL says: it holds its trial and leases the next before
//   acking it. want_prefetch(queue, n) moves the total within [prefetch,
//   prefetch_max] (`prefetch_max=M`, default max(N, 32)). RabbitMQ applies
//   basic.qos only to consumers started after it, so a raise adds a consumer
//   on the queue with the difference (the first one is never cancelled). A
//   lowering cancels extra consumers, but only one that holds its whole
//   prefetch: RabbitMQ 3.10's quorum queues return the deliveries on their
//   way to a consumer that is cancelled, with x-delivery-count + 1 (an
//   attempt), and a consumer without credit has none on the way; the
//   cancelled one's unleased deliveries are given back (republished with
//   the same attempt and error and acked, in one transaction). So a worker
//   whose trials became long does not keep tasks another could run.
// - A dead holder: its TCP connection closes (process exit or kill) and the
//   broker requeues its deliveries at once. A host that vanishes is noticed
//   by heartbeats (`heartbeat=S` in the URL; rabbitmq-c sends them only from
//   calls, so the holder calls keep_alive() or extend() more often than every
//   S/2 s: the worker does, every 250 ms while it trains).
// - Trials longer than the broker's consumer_timeout (30 min by default): the
//   broker closes the channel and redelivers. RabbitMQ 3.10 sets it only
//   server-wide: raise `consumer_timeout` in rabbitmq.conf above the longest
//   trial (src/queue/README.md, "Deployment").
// - cancel(queue) purges the queue and announces the cancel on the fanout
//   exchange `dnnlab.control`; every AmqpTaskQueue that has leased (or asked
//   cancelled()) is subscribed, and cancelled(queue) answers from what it
//   received.
// - Connection loss: the next call reconnects with backoff (50 ms doubling to
//   2 s, for up to busy_timeout_seconds, then std::runtime_error); leases of
//   the old connection are lost (ack/extend/nack answer false).
//
// Not thread-safe: one object per thread, opened after fork().
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "queue/amqp_connection.hpp"
#include "queue/task_queue.hpp"

namespace dnnlab::queue {

class AmqpConnection;

class AmqpTaskQueue final : public TaskQueue {
 public:
  // url: amqp://[user[:pass]@]host[:port]/[vhost][?prefetch=N&heartbeat=S]
  // (amqps:// for TLS). Throws std::invalid_argument naming a bad part, and
  // connects at once (std::runtime_error when the broker stays unreachable).
  AmqpTaskQueue(std::string_view url, TaskQueueOptions options);
  ~AmqpTaskQueue() override;

  std::int64_t publish(std::string_view queue, std::string_view payload) override;
  std::vector<std::int64_t> publish_batch(std::string_view queue,
                                          const std::vector<std::string>& payloads) override;
  std::optional<TaskLease> lease(std::string_view queue, std::string_view worker_id,
                                 double lease_seconds) override;
  bool extend(TaskLease& lease, double seconds) override;
  bool keep_alive(const TaskLease& lease) override;
  bool ack(const TaskLease& lease) override;
  std::vector<bool> ack_batch(const std::vector<TaskLease>& leases) override;
  bool nack(const TaskLease& lease, bool requeue, std::string_view error) override;
  // The broker's ready messages plus those it pushed to this object
  // (prefetch) that lease() has not returned yet. Other workers' prefetched
  // messages are not seen: prefetch = slots keeps them few.
  std::int64_t waiting(std::string_view queue) override;
  std::int64_t cancel(std::string_view queue) override;

  // True once a cancel(queue) from any process reached this object through
  // the control exchange (polls the connection, never blocks).
  bool cancelled(std::string_view queue) override;

  // Sets this consumer's prefetch on `queue` to n clamped to the URL's
  // [prefetch, prefetch_max] (see the header comment). n < 1 throws
  // std::invalid_argument. A lost connection is noticed by the next call.
  void want_prefetch(std::string_view queue, int n) override;
  // The prefetch of `queue`'s consumers together (0: not consuming).
  int consumer_prefetch(const std::string& queue) const;

  // Drops the deliveries pushed to us from `queue` and not leased (rejected,
  // not requeued); returns how many.
  std::int64_t drop_inbox(const std::string& queue);
  // drop_inbox() for the cancels received since the last call (pump() may
  // not: it runs inside other requests).
  void process_cancels();

  // Connections opened so far (1 + reconnects), for tests and logs.
  int connections_opened() const;

 private:
  struct Delivery;
  struct Held;

  void connect_with_backoff();
  AmqpConnection& conn();
  void lost();
  // A lease handed out by another AmqpTaskQueue (its handle's upper half is
  // not this object's tag).
  bool another_objects(const TaskLease& lease) const {
    return (lease.task_id >> 32) != object_tag_ && (lease.task_id >> 32) != 0;
  }
  void ensure_queue(const std::string& queue);
  void ensure_consumer(const std::string& queue);
  void ensure_control();
  // Reads what the broker sent (deliveries, confirms, closes) for up to
  // timeout_ms (0: only what is already there); false when nothing came.
  bool pump(int timeout_ms);
  std::optional<TaskLease> take(const std::string& queue, std::string_view worker_id,
                                double lease_seconds);
  // Publishes `payload` to `queue` on the consuming channel and acks `tag`,
  // in one transaction. False when the connection was lost.
  // ack() and ack_batch(): one transaction for every lease still ours.
  std::vector<bool> ack_all(const std::vector<const TaskLease*>& leases);
  bool republish_and_ack(const std::string& queue, const std::string& payload, int attempts_before,
                         const std::string& error, std::uint64_t tag);
  // Publishes `d` to `queue` again (same attempt and error) and acks it, on
  // the consuming channel; the caller commits.
  void republish(const std::string& queue, const Delivery& d);
  // Gives back the deliveries in `queue`'s inbox that came to `consumer`,
  // in one transaction.
  void give_back_inbox(const std::string& queue, const std::string& consumer);
  // At the end: every consumer cancelled, and each inbox (pushed, never
  // leased) given back as give_back_inbox() does.
  void give_back_all_inboxes();
  // want_prefetch() on a consuming queue: consumers added or cancelled.
  void adjust_prefetch(const std::string& queue, int want);
  // Deliveries of consumer tag `consumer` leased or in the inbox.
  int holding(const std::string& consumer) const;
  double now() const;

  std::string url_;
  std::string shown_url_;
  TaskQueueOptions options_;
  int prefetch_ = 1;                   // the URL's: the consumers' first and least prefetch
  int prefetch_max_ = 32;              // the most want_prefetch() sets
  std::map<std::string, int> wanted_;  // by queue: want_prefetch(), clamped
  // Consumers beyond a queue's first (prefetch_), added by want_prefetch().
  struct Extra {
    std::string tag;
    int prefetch = 0;
  };
  std::map<std::string, std::vector<Extra>> extra_;  // by queue
  int generation_ = 0;                               // consumer tags made
  std::unique_ptr<AmqpConnection> conn_;
  int connections_opened_ = 0;
  std::set<std::string> declared_;
  std::map<std::string, std::deque<Delivery>> inbox_;  // by queue, in delivery order
  std::set<std::string> consuming_;
  bool control_ = false;
  std::set<std::string> cancelled_;
  std::set<std::string> cancelled_pending_;  // announced, inbox not yet dropped
  std::map<std::int64_t, Held> held_;        // by lease handle (TaskLease::task_id)
  // Lease handles are (object_tag_ << 32 | n): extend() knows a lease of
  // another object (a worker's lease keeper thread) from one of its own.
  std::int64_t object_tag_ = 0;
  std::int64_t next_handle_ = 0;
  std::map<std::uint64_t, int> confirms_;  // publish seq -> 0 waiting, 1 acked, -1 nacked
  std::uint64_t next_seq_ = 1;
};

}  // namespace dnnlab::queue
