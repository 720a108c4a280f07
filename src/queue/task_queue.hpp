// TaskQueue: the seam between whoever creates work (the sweep) and whoever does
// it (workers). Backends are chosen by URL in open_task_queue() and nowhere else.
//
// A task is an opaque payload in a named queue (one queue per experiment).
// Delivery is at least once: a task can be delivered again (its holder died,
// its lease ran out, its connection dropped) and can even be published twice
// (the coordinator's recovery republishes rather than count what the queue
// holds). Consumers make a second delivery harmless, not the queue: dnnlab's
// workers do it with the store's (trial, attempt, worker) rule. After
// max_attempts deliveries a task is dead and goes to the dead-letter queue.
//
//   auto q = dnnlab::queue::open_task_queue("sqlite:runs/sweep.db");
//   q->publish_batch("exp-7", payloads);            // all or nothing
//   while (auto lease = q->lease("exp-7", "w1", 60)) {
//     ... do the work, q->extend(*lease, 60) now and then ...
//     if (!q->ack(*lease)) { /* lease lost: someone else redid the task */ }
//   }
//
// What the contract leaves out, on purpose: counts of leased or done tasks
// and a queue-kept history of each delivery's error. AMQP 0-9-1 cannot give
// them (a broker knows its ready messages and its unacked deliveries per
// channel, nothing about acked ones), so whatever needs them reads the
// store's trial states instead (store::ResultStore::trial_counts).
//
// What each backend guarantees:
//
// clang-format off
// | promise                     | sqlite:PATH                        | amqp://… (RabbitMQ)                      |
// |-----------------------------|------------------------------------|------------------------------------------|
// | a delivery is exclusive     | row lease in BEGIN IMMEDIATE       | one consumer per delivery (manual ack)   |
// | redelivery of a dead holder | lease deadline passes (extend()    | its connection closes, or the broker's   |
// |                             | moves it); any process leases it   | consumer timeout fires                   |
// | attempt                     | exact, +1 per delivery             | carried in a message header; +1 when the |
// |                             |                                    | backend republishes (nack, requeue) and  |
// |                             |                                    | the broker's delivery count (quorum      |
// |                             |                                    | queue) on a redelivery                   |
// | error                       | nack reasons and lease expiries    | nack reasons, carried in a header        |
// | extend()                    | moves the deadline, from any       | true while the delivering channel is     |
// |                             | object opened on the same URL      | open; longer than consumer_timeout needs |
// |                             |                                    | the broker's timeout raised              |
// | publish_batch               | one transaction                    | publisher confirms for the whole batch   |
// | ack_batch                   | one ack per lease (write_together  | one tx.commit for all (multiple-ack when |
// |                             | makes it one commit)               | they are a prefix of the outstanding)    |
// | write_together              | one commit with a store sharing    | runs `work` (no shared transaction)      |
// |                             | the file                           |                                          |
// | cancelled()                 | false (workers read the store's    | true once the cancel, announced on the   |
// |                             | trial state)                       | dnnlab.control fanout, reached the object|
// clang-format on
//
// AmqpTaskQueue (amqp_task_queue.hpp) says how each is done on the broker.
//
// Objects are not thread-safe; open one per thread, and in each process after
// fork() (every process gets its own connection).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace dnnlab::db {
class Connections;
}

namespace dnnlab::queue {

struct TaskLease {
  // The backend's handle of this delivery (SQLite: the task's row id; AMQP:
  // the backend's own numbering). Only the backend that issued it reads it.
  std::int64_t task_id = 0;
  std::string queue;
  std::string payload;
  std::string worker_id;
  // 1 on first delivery, and greater on every later delivery of the same
  // published task. A task published twice (recovery) starts at 1 each time.
  int attempt = 0;
  double deadline = 0.0;  // unix seconds; after it the task may be redelivered
  // Why earlier deliveries ended, "; "-joined, as far as the message carries
  // it (see the table above). On a dead letter: why the task died.
  std::string error;
};

// Where a queue's dead tasks go: a task that dies (max_attempts deliveries,
// or a nack without requeue) is published again, same payload, to this
// queue, with its `error`, so that whoever owns the work (the experiment
// coordinator) learns of it and can record the failure. RabbitMQ's
// dead-letter exchange is the same idea.
std::string dead_letter_queue(std::string_view queue);

struct TaskQueueOptions {
  // Deliveries per task; a task that would need one more goes to dead.
  int max_attempts = 3;
  // How long a write waits for another process's write before failing.
  double busy_timeout_seconds = 30.0;
  // Unix seconds; tests replace it to expire leases without sleeping.
  std::function<double()> clock;
};

class TaskQueue {
 public:
  virtual ~TaskQueue() = default;

  // Ids are the backend's, for logs and tests (SQLite: row ids; AMQP:
  // publisher sequence numbers), in payload order.
  virtual std::int64_t publish(std::string_view queue, std::string_view payload) = 0;
  // All tasks or none: one transaction, or publisher confirms for each.
  virtual std::vector<std::int64_t> publish_batch(std::string_view queue,
                                                  const std::vector<std::string>& payloads) = 0;

  // Takes the oldest available task; nullopt when none is available now.
  virtual std::optional<TaskLease> lease(std::string_view queue, std::string_view worker_id,
                                         double lease_seconds) = 0;
  // Keeps the lease for `seconds` more (and updates lease.deadline). False
  // when it was lost: the task was redelivered, acked or dropped.
  virtual bool extend(TaskLease& lease, double seconds) = 0;
  // Called by the holder of `lease` while it works on the task (every few
  // hundred ms, from the thread that leased it): keeps this object's
  // connection alive, and false when the lease was lost. A broker that
  // detects dead peers by heartbeats (AMQP `heartbeat=S`) hears from the
  // holder's own connection only through calls on it; a queue whose leases
  // are rows with deadlines (SQLite) needs nothing here, since extend() on
  // any connection keeps them.
  virtual bool keep_alive(const TaskLease& lease) { return true; }
  // Marks the task done. False when the lease is no longer ours (the task
  // was redelivered to another worker); the caller must then not count it.
  virtual bool ack(const TaskLease& lease) = 0;
  // Acks several leases with one commit (AMQP: one tx.commit, a single
  // multiple-ack when they are every delivery outstanding up to the last):
  // element i is what ack(leases[i]) would have answered. A worker that ran
  // several short trials acks them together once their results are stored,
  // instead of paying a broker round trip per trial. The default acks one
  // by one.
  virtual std::vector<bool> ack_batch(const std::vector<TaskLease>& leases) {
    std::vector<bool> acked;
    acked.reserve(leases.size());
    for (const TaskLease& l : leases) acked.push_back(ack(l));
    return acked;
  }
  // Gives the task back: requeue=true makes it available again with
  // attempt + 1 and `error` carried along (or dead once max_attempts is
  // reached); requeue=false sends it to dead with `error`. False when the
  // lease is no longer ours.
  virtual bool nack(const TaskLease& lease, bool requeue, std::string_view error) = 0;

  // How many tasks of `queue` this consumer wants the backend to hand it
  // ahead of its leases (a hint, at least 1): a worker whose trials take a
  // few milliseconds asks for a batch, one whose trials are long asks for
  // little, so that it does not hold tasks another worker could run. A
  // broker that pushes (AMQP) changes its per-consumer prefetch within the
  // bounds of its URL and gives back what it prefetched beyond a lowered
  // one; a backend that leases on demand (SQLite) ignores it.
  virtual void want_prefetch(std::string_view queue, int n) {
    (void)queue;
    (void)n;
  }

  // Runs `work`, whose queue and store calls then commit together, once,
  // when the store shares this queue's database (both opened by the same
  // embedded URL: they share one connection through db::Connections): one
  // commit instead of one per call, for short trials. An exception from
  // `work` undoes what shares the transaction. Other backends run `work` as
  // it is, each call committing on its own, so `work` must be correct
  // either way.
  virtual void write_together(const std::function<void()>& work) { work(); }

  // Tasks published to `queue` and not delivered now (AMQP: the queue's
  // ready message count). Leased and done tasks are not counted: ask the
  // store. A read: cheap enough to ask every tick before leasing.
  virtual std::int64_t waiting(std::string_view queue) = 0;
  // Drops the queue's waiting tasks (leased ones run to the end); returns how
  // many. A backend with a broadcast also announces it (see cancelled()).
  virtual std::int64_t cancel(std::string_view queue) = 0;
  // True once a cancel(queue), from any process, reached this object: a
  // worker polls it between epochs to stop the queue's running trials early.
  // Never blocks. A backend without a broadcast answers false; the store's
  // trial state (cancelled) is the authority either way.
  virtual bool cancelled(std::string_view queue) {
    (void)queue;
    return false;
  }
};

// The backend is not compiled into this build, or not available yet.
class BackendNotBuiltError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Opens a queue by URL:
//   sqlite:PATH   embedded, one file shared by processes on this machine
//   amqp://…      RabbitMQ, amqps://… over TLS (AmqpTaskQueue; ?prefetch=N for a
//                 worker with N slots); BackendNotBuiltError in a build
//                 without rabbitmq-c
// Any other URL throws std::invalid_argument naming it. A file written by a
// newer dnnlab throws std::runtime_error saying so. With `shared`, a store
// opened through the same db::Connections on the same database shares the
// connection (see write_together); without, the queue has its own.
std::unique_ptr<TaskQueue> open_task_queue(std::string_view url, TaskQueueOptions options = {},
                                           db::Connections* shared = nullptr);

}  // namespace dnnlab::queue
