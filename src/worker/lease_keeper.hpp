// LeaseKeeper: keeps a worker's task leases alive on its own thread and its
// own queue and store connections, every lease_seconds / 4, whatever the
// worker's thread is doing meanwhile — loading a data set, one batch slower
// than the lease, evaluating. Heartbeats follow the clock, not the batches.
//
//   LeaseKeeper keeper(broker_url, store_url, worker_id, lease_seconds);
//   auto lease = queue->lease(q, worker_id, lease_seconds);
//   keeper.keep(*lease);
//   ... train; stop when keeper.lost(*lease) ...
//   keeper.drop(*lease);   // before ack or nack: a done task cannot be extended
//   queue->ack(*lease);
//
// A lease whose extension fails (the task went to another worker) is
// reported by lost(); the worker must then stop and not count the trial.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include "queue/task_queue.hpp"

namespace dnnlab::worker {

class LeaseKeeper {
 public:
  LeaseKeeper(std::string broker_url, std::string store_url, std::string worker_id,
              double lease_seconds);
  ~LeaseKeeper();
  LeaseKeeper(const LeaseKeeper&) = delete;
  LeaseKeeper& operator=(const LeaseKeeper&) = delete;

  void keep(const queue::TaskLease& lease);
  void drop(const queue::TaskLease& lease);
  bool lost(const queue::TaskLease& lease) const;
  // The trial the worker's heartbeats name (nullopt: none).
  void set_current_trial(std::optional<int64_t> trial_id);

 private:
  void run();

  const std::string broker_url_, store_url_, worker_id_;
  const double lease_seconds_;
  mutable std::mutex mu_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::map<int64_t, queue::TaskLease> held_;  // task id -> lease
  std::set<std::pair<int64_t, int>> lost_;    // (task id, attempt)
  std::optional<int64_t> current_trial_;
  std::thread thread_;
};

}  // namespace dnnlab::worker
