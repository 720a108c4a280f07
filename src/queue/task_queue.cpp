// open_task_queue(): the one place that maps a URL to a TaskQueue backend.
#include "queue/task_queue.hpp"

#include "db/backend_url.hpp"
#include "db/connections.hpp"
#include "db/sqlite_db.hpp"
#ifdef DNNLAB_WITH_AMQP
#include "queue/amqp_task_queue.hpp"
#endif
#include "queue/sqlite_task_queue.hpp"

namespace dnnlab::queue {

std::string dead_letter_queue(std::string_view queue) {
  return std::string(queue) + ".dead";
}

std::unique_ptr<TaskQueue> open_task_queue(std::string_view url, TaskQueueOptions options,
                                           db::Connections* shared) {
  const std::string scheme = backend_url::scheme(url);
  const std::string shown = backend_url::redact(url);
  if (scheme == "sqlite") {
    std::string path = backend_url::sqlite_path(url);
    if (path.empty())
      throw std::invalid_argument("task queue URL '" + shown + "' has no file path (sqlite:PATH)");
    const double busy = options.busy_timeout_seconds;
    auto db = shared ? shared->sqlite(path, busy)
                     : std::make_shared<sqlite::Database>(path, sqlite::DatabaseOptions{busy});
    return std::make_unique<SqliteTaskQueue>(std::move(db), std::move(options));
  }
  if (scheme == "amqp" || scheme == "amqps")
#ifdef DNNLAB_WITH_AMQP
    return std::make_unique<AmqpTaskQueue>(url, std::move(options));
#else
    throw BackendNotBuiltError("task queue URL '" + shown +
                               "': the AMQP (RabbitMQ) backend is not built into this dnnlab "
                               "(configure with rabbitmq-c, DNNLAB_WITH_AMQP=ON); use sqlite:PATH");
#endif
  throw std::invalid_argument("task queue URL '" + shown +
                              "' is not supported: expected sqlite:PATH or amqp://HOST/VHOST");
}

}  // namespace dnnlab::queue
