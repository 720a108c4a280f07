// The worker loop: lease a trial from any running experiment, train it,
// stream per-epoch metrics to the store, let the experiment's scheduler stop
// it early (ASHA, median rule), heartbeat, and ack. A worker killed mid-trial
// loses its lease; the trial is delivered again (attempt + 1) elsewhere and,
// because store writes are idempotent by (trial, attempt), counted once.
//
//   worker::WorkerOptions o;
//   o.broker_url = o.store_url = "sqlite:dnnlab.db";
//   o.stop = &stop_flag;                 // a std::atomic<bool>: a signal handler or thread sets it
//   int trials = worker::run_worker(o);  // returns when stopped or idle
#pragma once
#include <atomic>
#include <cstdint>
#include <string>


namespace dnnlab::worker {

struct WorkerOptions {
  std::string broker_url, store_url;
  std::string worker_id;      // default: <host>-<pid>
  std::string data_dir;       // overrides the data sets' default location
  int64_t experiment = 0;     // only this experiment (0: any running one)
  double lease_seconds = 30;  // extended while training
  // Exit after this long with nothing to do (0: never). With `experiment`
  // set, also exit as soon as that experiment is no longer running.
  double idle_exit_seconds = 0;
  // true: finish up and return. Atomic, not volatile sig_atomic_t: tests and
  // embedders set it from another thread (a data race with volatile), and a
  // lock-free atomic is as safe as sig_atomic_t in a signal handler.
  const std::atomic<bool>* stop = nullptr;
  bool verbose = false;
};

// Runs until stopped or idle; returns the number of trials it ended.
int64_t run_worker(const WorkerOptions& options);

}  // namespace dnnlab::worker
