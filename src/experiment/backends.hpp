// Backends: a task queue and a result store opened together by URL, sharing
// a connection when both URLs name one embedded database (db::Connections),
// so that queue.write_together() commits the writes of both at once. What
// every process that drives or runs trials opens first (coordinator,
// server, native worker, lease keeper).
//
//   auto b = experiment::open_backends("sqlite:dnnlab.db", "sqlite:dnnlab.db");
//   b.queue->write_together([&] { b.store->mark_running(...); b.queue->ack(lease); });
//
// Use the two from one thread only (a shared connection is not thread-safe).
#pragma once
#include <memory>
#include <string>

#include "queue/task_queue.hpp"
#include "store/result_store.hpp"

namespace dnnlab::experiment {

struct Backends {
  std::unique_ptr<queue::TaskQueue> queue;
  std::unique_ptr<store::ResultStore> store;
  std::string broker_url, store_url;
};

// Opens both by URL (see open_task_queue / open_result_store).
Backends open_backends(const std::string& broker_url, const std::string& store_url,
                       const store::StoreOptions& store_options = {});

}  // namespace dnnlab::experiment
