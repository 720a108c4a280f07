// The worker's heartbeat thread (see lease_keeper.hpp).
#include "worker/lease_keeper.hpp"

#include <chrono>
#include <iostream>
#include <vector>

#include "experiment/backends.hpp"

namespace dnnlab::worker {

using Clock = std::chrono::steady_clock;

LeaseKeeper::LeaseKeeper(std::string broker_url, std::string store_url, std::string worker_id,
                         double lease_seconds)
    : broker_url_(std::move(broker_url)),
      store_url_(std::move(store_url)),
      worker_id_(std::move(worker_id)),
      lease_seconds_(lease_seconds),
      thread_([this] { run(); }) {}

LeaseKeeper::~LeaseKeeper() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void LeaseKeeper::keep(const queue::TaskLease& lease) {
  std::lock_guard lock(mu_);
  held_[lease.task_id] = lease;
}

void LeaseKeeper::drop(const queue::TaskLease& lease) {
  std::lock_guard lock(mu_);
  auto it = held_.find(lease.task_id);
  if (it != held_.end() && it->second.attempt == lease.attempt) held_.erase(it);
  lost_.erase({lease.task_id, lease.attempt});
}

bool LeaseKeeper::lost(const queue::TaskLease& lease) const {
  std::lock_guard lock(mu_);
  return lost_.count({lease.task_id, lease.attempt}) > 0;
}

void LeaseKeeper::set_current_trial(std::optional<int64_t> trial_id) {
  std::lock_guard lock(mu_);
  current_trial_ = trial_id;
}

void LeaseKeeper::run() {
  // Four extensions per lease: one late extension (a busy database, a
  // loaded machine) still leaves the lease alive.
  const auto period = std::chrono::duration<double>(lease_seconds_ / 4);
  const auto beat_period = std::chrono::seconds(2);
  std::optional<experiment::Backends> b;
  auto last_beat = Clock::now();
  std::unique_lock lock(mu_);
  while (!wake_.wait_for(lock, period, [this] { return stop_; })) {
    if (held_.empty()) continue;
    std::vector<queue::TaskLease> leases;
    for (const auto& [id, lease] : held_) leases.push_back(lease);
    const std::optional<int64_t> trial = current_trial_;
    // Database writes without the lock: the worker's thread may hold the
    // database's write lock while it waits for ours (drop before ack).
    lock.unlock();
    std::vector<const queue::TaskLease*> failed;
    try {
      // A store outage must not hold up the lease extensions (the worker's
      // own calls wait for the store): its heartbeat fails at once instead.
      store::StoreOptions fail_fast;
      fail_fast.reconnect_seconds = 0;
      if (!b) b = experiment::open_backends(broker_url_, store_url_, fail_fast);
      for (auto& lease : leases)
        if (!b->queue->extend(lease, lease_seconds_)) failed.push_back(&lease);
      if (trial && Clock::now() - last_beat > beat_period) {
        b->store->heartbeat(worker_id_, trial);
        last_beat = Clock::now();
      }
    } catch (const std::exception& e) {
      // A busy or unreachable database: try again next period.
      std::cerr << worker_id_ << ": lease heartbeat: " << e.what() << "\n";
    }
    lock.lock();
    // Only leases still held count as lost: one dropped meanwhile was acked.
    for (const queue::TaskLease* l : failed) {
      auto it = held_.find(l->task_id);
      if (it != held_.end() && it->second.attempt == l->attempt) {
        lost_.insert({l->task_id, l->attempt});
        held_.erase(it);
      }
    }
  }
}

}  // namespace dnnlab::worker
