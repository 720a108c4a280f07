// The embedded TaskQueue: tasks are rows of one SQLite file (WAL) that the
// coordinator and the local worker processes open side by side.
#pragma once

#include <memory>
#include <string>

#include "db/sqlite_db.hpp"
#include "queue/task_queue.hpp"

namespace dnnlab::queue {

class SqliteTaskQueue final : public TaskQueue {
 public:
  // On a connection of its own, or one a store uses too (db::Connections):
  // then write_together() commits the writes of both at once.
  SqliteTaskQueue(std::shared_ptr<sqlite::Database> db, TaskQueueOptions options);

  std::int64_t publish(std::string_view queue, std::string_view payload) override;
  std::vector<std::int64_t> publish_batch(std::string_view queue,
                                          const std::vector<std::string>& payloads) override;
  std::optional<TaskLease> lease(std::string_view queue, std::string_view worker_id,
                                 double lease_seconds) override;
  bool extend(TaskLease& lease, double seconds) override;
  bool ack(const TaskLease& lease) override;
  bool nack(const TaskLease& lease, bool requeue, std::string_view error) override;
  std::int64_t waiting(std::string_view queue) override;
  std::int64_t cancel(std::string_view queue) override;
  void write_together(const std::function<void()>& work) override;

  static constexpr int kSchemaVersion = 1;

 private:
  void dead_letter(std::int64_t id, double t);
  double now() const { return options_.clock ? options_.clock() : sqlite::unix_now(); }

  TaskQueueOptions options_;
  std::shared_ptr<sqlite::Database> db_;
};

}  // namespace dnnlab::queue
