// SqliteTaskQueue: leases are rows updated inside BEGIN IMMEDIATE transactions,
// so processes sharing the file never hand out one delivery twice.
#include "queue/sqlite_task_queue.hpp"

#include <array>
#include <cmath>

namespace dnnlab::queue {
namespace {

// Task states as stored. Integers keep the (queue, state, id) index small.
enum State : int { kQueued = 0, kLeased = 1, kDone = 2, kDead = 3 };

constexpr std::array<sqlite::Migration, 1> kMigrations{{
    {1, R"sql(
CREATE TABLE queue_tasks (
  id          INTEGER PRIMARY KEY,
  queue       TEXT    NOT NULL,
  payload     BLOB    NOT NULL,
  state       INTEGER NOT NULL CHECK (state IN (0, 1, 2, 3)),
  attempt     INTEGER NOT NULL DEFAULT 0,
  worker      TEXT,
  deadline    REAL,
  enqueued_at REAL    NOT NULL,
  finished_at REAL,
  error       TEXT
);
-- Oldest queued task and the (few) leased ones of a queue: O(log n) probes.
CREATE INDEX queue_tasks_by_state ON queue_tasks (queue, state, id);
)sql"},
}};

void check_name(std::string_view value, const char* field) {
  if (value.empty()) throw std::invalid_argument(std::string(field) + " must not be empty");
}

void check_seconds(double seconds, const char* field) {
  if (!std::isfinite(seconds) || seconds <= 0.0)
    throw std::invalid_argument(std::string(field) + " must be a positive number of seconds, got " +
                                std::to_string(seconds));
}

}  // namespace

// Inside the caller's transaction, right after task `id` went to kDead: its
// payload and error, queued again on the dead-letter queue.
void SqliteTaskQueue::dead_letter(std::int64_t id, double t) {
  auto stmt = db_->prepare(
      "INSERT INTO queue_tasks (queue, payload, state, enqueued_at, error) "
      "SELECT queue || '.dead', payload, 0, ?2, error FROM queue_tasks WHERE id = ?1");
  stmt.bind_int(1, id).bind_double(2, t);
  stmt.run();
}

SqliteTaskQueue::SqliteTaskQueue(std::shared_ptr<sqlite::Database> db, TaskQueueOptions options)
    : options_(std::move(options)), db_(std::move(db)) {
  if (options_.max_attempts < 1)
    throw std::invalid_argument("max_attempts must be at least 1, got " +
                                std::to_string(options_.max_attempts));
  static_assert(kMigrations.back().version == kSchemaVersion);
  sqlite::migrate(*db_, "queue", kMigrations);
}

std::int64_t SqliteTaskQueue::publish(std::string_view queue, std::string_view payload) {
  return publish_batch(queue, {std::string(payload)}).front();
}

std::vector<std::int64_t> SqliteTaskQueue::publish_batch(std::string_view queue,
                                                         const std::vector<std::string>& payloads) {
  check_name(queue, "queue");
  std::vector<std::int64_t> ids;
  ids.reserve(payloads.size());
  if (payloads.empty()) return ids;
  const double t = now();
  sqlite::WriteTransaction tx(*db_);
  for (const std::string& payload : payloads) {
    auto insert = db_->prepare(
        "INSERT INTO queue_tasks (queue, payload, state, enqueued_at) VALUES (?1, ?2, 0, ?3)");
    insert.bind_text(1, queue).bind_blob(2, payload).bind_double(3, t);
    insert.run();
    ids.push_back(db_->last_insert_rowid());
  }
  tx.commit();
  return ids;
}

std::optional<TaskLease> SqliteTaskQueue::lease(std::string_view queue, std::string_view worker_id,
                                                double lease_seconds) {
  check_name(queue, "queue");
  check_name(worker_id, "worker_id");
  check_seconds(lease_seconds, "lease_seconds");
  sqlite::WriteTransaction tx(*db_);
  const double t = now();
  for (;;) {
    // Two index probes instead of one OR, so neither needs a sort: the oldest
    // queued task, and the oldest expired lease (there are only as many
    // leases as workers).
    struct Candidate {
      std::int64_t id;
      int attempt;
    };
    std::optional<Candidate> best;
    {
      auto q = db_->prepare(
          "SELECT id, attempt FROM queue_tasks WHERE queue = ?1 AND state = 0 ORDER BY id LIMIT 1");
      q.bind_text(1, queue);
      if (q.step()) best = Candidate{q.column_int(0), static_cast<int>(q.column_int(1))};
    }
    {
      auto q = db_->prepare(
          "SELECT id, attempt FROM queue_tasks WHERE queue = ?1 AND state = 1 AND deadline <= ?2 "
          "ORDER BY id LIMIT 1");
      q.bind_text(1, queue).bind_double(2, t);
      if (q.step() && (!best || q.column_int(0) < best->id))
        best = Candidate{q.column_int(0), static_cast<int>(q.column_int(1))};
    }
    if (!best) {
      tx.commit();
      return std::nullopt;
    }
    if (best->attempt >= options_.max_attempts) {
      auto dead = db_->prepare(
          "UPDATE queue_tasks SET state = 3, worker = NULL, deadline = NULL, finished_at = ?2, "
          "error = coalesce(error || '; ', '') || ?3 WHERE id = ?1");
      dead.bind_int(1, best->id).bind_double(2, t);
      dead.bind_text(3, "lease expired on attempt " + std::to_string(best->attempt) +
                            " of max_attempts " + std::to_string(options_.max_attempts));
      dead.run();
      dead_letter(best->id, t);
      continue;
    }
    TaskLease lease;
    lease.task_id = best->id;
    lease.queue = std::string(queue);
    lease.worker_id = std::string(worker_id);
    lease.attempt = best->attempt + 1;
    lease.deadline = t + lease_seconds;
    {
      auto take = db_->prepare(
          "UPDATE queue_tasks SET state = 1, attempt = ?2, worker = ?3, deadline = ?4 "
          "WHERE id = ?1 RETURNING payload, coalesce(error, '')");
      take.bind_int(1, lease.task_id).bind_int(2, lease.attempt);
      take.bind_text(3, worker_id).bind_double(4, lease.deadline);
      if (!take.step()) throw std::logic_error("leased task vanished inside its transaction");
      lease.payload = take.column_text(0);
      lease.error = take.column_text(1);
      take.run();  // finish the RETURNING statement before COMMIT
    }
    tx.commit();
    return lease;
  }
}

bool SqliteTaskQueue::extend(TaskLease& lease, double seconds) {
  check_seconds(seconds, "seconds");
  const double deadline = now() + seconds;
  // A lease that expired but was not yet redelivered is still ours.
  auto stmt = db_->prepare(
      "UPDATE queue_tasks SET deadline = ?4 "
      "WHERE id = ?1 AND state = 1 AND attempt = ?2 AND worker = ?3");
  stmt.bind_int(1, lease.task_id).bind_int(2, lease.attempt);
  stmt.bind_text(3, lease.worker_id).bind_double(4, deadline);
  stmt.run();
  if (db_->changes() != 1) return false;
  lease.deadline = deadline;
  return true;
}

bool SqliteTaskQueue::ack(const TaskLease& lease) {
  auto stmt = db_->prepare(
      "UPDATE queue_tasks SET state = 2, deadline = NULL, finished_at = ?4 "
      "WHERE id = ?1 AND state = 1 AND attempt = ?2 AND worker = ?3");
  stmt.bind_int(1, lease.task_id).bind_int(2, lease.attempt);
  stmt.bind_text(3, lease.worker_id).bind_double(4, now());
  stmt.run();
  return db_->changes() == 1;
}

bool SqliteTaskQueue::nack(const TaskLease& lease, bool requeue, std::string_view error) {
  const bool give_up = !requeue || lease.attempt >= options_.max_attempts;
  std::string reason(error);
  if (requeue && give_up)
    reason += (reason.empty() ? "" : "; ") + std::string("max_attempts ") +
              std::to_string(options_.max_attempts) + " reached";
  const double t = now();
  sqlite::WriteTransaction tx(*db_);
  auto stmt = db_->prepare(
      "UPDATE queue_tasks SET state = ?4, worker = NULL, deadline = NULL, "
      "error = CASE WHEN ?5 = '' THEN error ELSE coalesce(error || '; ', '') || ?5 END, "
      "finished_at = CASE WHEN ?4 = 3 THEN ?6 ELSE NULL END "
      "WHERE id = ?1 AND state = 1 AND attempt = ?2 AND worker = ?3");
  stmt.bind_int(1, lease.task_id).bind_int(2, lease.attempt).bind_text(3, lease.worker_id);
  stmt.bind_int(4, give_up ? kDead : kQueued);
  stmt.bind_text(5, reason).bind_double(6, t);
  stmt.run();
  const bool ours = db_->changes() == 1;
  if (ours && give_up) dead_letter(lease.task_id, t);
  tx.commit();
  return ours;
}

std::int64_t SqliteTaskQueue::waiting(std::string_view queue) {
  check_name(queue, "queue");
  auto stmt = db_->prepare("SELECT count(*) FROM queue_tasks WHERE queue = ?1 AND state = 0");
  stmt.bind_text(1, queue);
  stmt.step();
  return stmt.column_int(0);
}

std::int64_t SqliteTaskQueue::cancel(std::string_view queue) {
  check_name(queue, "queue");
  auto stmt = db_->prepare("DELETE FROM queue_tasks WHERE queue = ?1 AND state = 0");
  stmt.bind_text(1, queue);
  stmt.run();
  return db_->changes();
}

void SqliteTaskQueue::write_together(const std::function<void()>& work) {
  // Only a store opened with this queue shares the connection; holding the
  // write lock here while a separately opened store waits for it would
  // deadlock (until the busy timeout).
  if (db_.use_count() < 2) return work();
  sqlite::WriteTransaction tx(*db_);
  work();
  tx.commit();
}

}  // namespace dnnlab::queue
