// TaskQueue: the seam between whoever creates work (the sweep) and whoever does
// it (workers). Backends are chosen by URL in open_task_queue() and nowhere else.
//
// A task is an opaque payload in a named queue (one queue per experiment).
// Delivery is at-least-once with leases: a leased task that is neither acked nor
// extended before its deadline is delivered again with attempt + 1, and the old
// lease can no longer ack it. After max_attempts deliveries a task is dead.
//
//   auto q = dnnlab::queue::open_task_queue("sqlite:runs/sweep.db");
//   q->publish_batch("exp-7", payloads);            // one transaction
//   while (auto lease = q->lease("exp-7", "w1", 60)) {
//     ... do the work, q->extend(*lease, 60) now and then ...
//     if (!q->ack(*lease)) { /* lease lost: someone else redid the task */ }
//   }
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

namespace dnnlab::queue {

struct TaskLease {
  std::int64_t task_id = 0;
  std::string queue;
  std::string payload;
  std::string worker_id;
  int attempt = 0;        // 1 on first delivery, +1 on each redelivery
  double deadline = 0.0;  // unix seconds; after it the task may be redelivered
  // Why earlier deliveries ended (lease expiries, nack errors), "; "-joined.
  // On a dead letter: why the task died.
  std::string error;
};

// Where a queue's dead tasks go: a task that dies (max_attempts deliveries,
// or a nack without requeue) is published again, same payload, to this
// queue, with its `error`, so that whoever owns the work (the experiment
// coordinator) learns of it and can record the failure. RabbitMQ's
// dead-letter exchange is the same idea.
std::string dead_letter_queue(std::string_view queue);

struct QueueCounts {
  std::int64_t queued = 0;  // waiting for a worker
  std::int64_t leased = 0;  // held by a worker (including expired, not yet redelivered)
  std::int64_t done = 0;    // acked
  std::int64_t dead = 0;    // failed for good (nack without requeue, or max attempts);
                            // each also sits in dead_letter_queue(queue) until taken
};

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

  virtual std::int64_t publish(std::string_view queue, std::string_view payload) = 0;
  // All tasks in one transaction; ids are returned in payload order.
  virtual std::vector<std::int64_t> publish_batch(std::string_view queue,
                                                  const std::vector<std::string>& payloads) = 0;

  // Atomically takes the oldest available task (queued, or leased with an
  // expired deadline); nullopt when none is available.
  virtual std::optional<TaskLease> lease(std::string_view queue, std::string_view worker_id,
                                         double lease_seconds) = 0;
  // Moves the deadline to now + seconds (and updates lease.deadline). False
  // when the lease was lost: the task was redelivered, acked or dropped.
  virtual bool extend(TaskLease& lease, double seconds) = 0;
  // Marks the task done. False when the lease is no longer ours (the task
  // was redelivered to another worker); the caller must then not count it.
  virtual bool ack(const TaskLease& lease) = 0;
  // Gives the task back: requeue=true makes it available again (or dead once
  // max_attempts is reached); requeue=false sends it to dead with `error`.
  // False when the lease is no longer ours.
  virtual bool nack(const TaskLease& lease, bool requeue, std::string_view error) = 0;

  // Runs `work`, whose queue and store calls then commit together, once,
  // when the store shares this queue's database (store::open_result_store(
  // url, queue) on the same embedded file): one commit instead of one per
  // call, for short trials. An exception from `work` undoes what shares the
  // transaction. Other backends run `work` as it is, each call committing on
  // its own, so `work` must be correct either way. A queue no store shares
  // a connection with just runs `work` (a store opened separately on the same
  // file would otherwise wait for this queue's write lock).
  virtual void write_together(const std::function<void()>& work) { work(); }

  virtual QueueCounts counts(std::string_view queue) = 0;
  // Drops the queue's queued tasks (leased ones run to the end); returns how many.
  virtual std::int64_t cancel(std::string_view queue) = 0;
};

// The backend is not compiled into this build, or not available yet.
class BackendNotBuiltError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Opens a queue by URL:
//   sqlite:PATH   embedded, one file shared by processes on this machine
//   amqp://…      RabbitMQ (not built yet: throws BackendNotBuiltError)
// Any other URL throws std::invalid_argument naming it. A file written by a
// newer dnnlab throws std::runtime_error saying so.
std::unique_ptr<TaskQueue> open_task_queue(std::string_view url, TaskQueueOptions options = {});

}  // namespace dnnlab::queue
