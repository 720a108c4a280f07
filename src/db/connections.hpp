// db::Connections: the database connections one thread has open, keyed by
// what they connect to, so that a queue and a store opened by the same URL
// share one connection (and so one transaction: TaskQueue::write_together)
// without either knowing the other's type.
//
//   db::Connections shared;                       // one per thread
//   auto queue = queue::open_task_queue(url, {}, &shared);
//   auto store = store::open_result_store(url, &shared);
//   queue->write_together([&] { ... both commit at once ... });
//
// It holds no connection itself (weak references): a connection closes
// when the last queue or store using it goes. Not thread-safe, like the
// connections it hands out: one per thread, and per process after fork().
#pragma once

#include <map>
#include <memory>
#include <string>

namespace dnnlab::sqlite {
class Database;
}

namespace dnnlab::db {

class Connections {
 public:
  // The connection to the embedded file at `path`, opened on first use (the
  // key is the canonical path: "a.db" and "./a.db" share). The first
  // opener's busy timeout is the connection's.
  std::shared_ptr<sqlite::Database> sqlite(const std::string& path, double busy_timeout_seconds);

 private:
  std::map<std::string, std::weak_ptr<sqlite::Database>> sqlite_;
};

}  // namespace dnnlab::db
