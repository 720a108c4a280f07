// ExperimentRunner: the server's side of running sweeps — submitting them,
// ticking a Coordinator per running experiment, cancelling, and the live
// figures /api/stats reports (trials/s, queue depth). Experiments adopted by
// `dnnlab run` are only reported on.
//
// Thread-safe. The server gives it a store and queue of its own and ticks it
// on a thread of its own; REST handlers call submit/cancel from reader
// threads (waiting for a tick at most), and the figures are read without
// waiting (sampled by tick(), about once a second).
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "queue/task_queue.hpp"
#include "store/result_store.hpp"
#include "sweep/sweep_spec.hpp"

namespace dnnlab::experiment {
class Coordinator;
}

namespace dnnlab::server {

class ExperimentRunner {
 public:
  ExperimentRunner(store::ResultStore& store, queue::TaskQueue& queue, bool run_coordinators);
  ~ExperimentRunner();

  // Makes coordinators for experiments left running by an earlier server.
  void resume_running();
  // Validates (dnnlab::SpecError) and creates the experiment; returns its id.
  std::int64_t submit(const std::string& sweep_text, const std::string& name);
  // The two halves of submit(), so that parsing (slow for a large sweep) can
  // run off the io thread: parse() touches no store and is thread-safe;
  // submit_parsed() writes the experiment from what parse() returned.
  static std::shared_ptr<sweep::SweepSpec> parse(const std::string& sweep_text,
                                                 const std::string& name);
  std::int64_t submit_parsed(std::shared_ptr<sweep::SweepSpec> sweep, const std::string& sweep_text,
                             const std::string& name);
  // False when the experiment does not exist.
  bool cancel(std::int64_t experiment_id);
  void adopt(std::int64_t experiment_id);
  // Ticks every coordinator; samples throughput and queue depth about once
  // a second (the first call samples at once).
  void tick();

  // Trials the sweep will run in all, while a coordinator here drives it.
  std::optional<std::int64_t> planned(std::int64_t experiment_id) const;
  double trials_per_second() const { return rate_.load(); }
  // Tasks waiting in the queues of running experiments, as last sampled.
  std::int64_t queue_depth() const { return depth_.load(); }

 private:
  void sample();                            // under mu_
  void forget(std::int64_t experiment_id);  // under mu_: no longer driven here

  mutable std::mutex mu_;  // everything below but planned_ and the figures

  store::ResultStore& store_;
  queue::TaskQueue& queue_;
  bool run_coordinators_;
  std::map<std::int64_t, std::unique_ptr<experiment::Coordinator>> coordinators_;
  std::set<std::int64_t> adopted_;
  mutable std::mutex planned_mu_;
  std::map<std::int64_t, std::int64_t> planned_;  // only experiments driven here
  // (time, trials ended over all experiments): the last ~10 s.
  std::deque<std::pair<std::chrono::steady_clock::time_point, std::int64_t>> ended_samples_;
  std::chrono::steady_clock::time_point last_sample_{};
  std::atomic<double> rate_{0};
  std::atomic<std::int64_t> depth_{0};
};

// Trials ended (finished, pruned, failed, cancelled) in `c`.
inline std::int64_t ended(const store::TrialCounts& c) {
  return c.finished + c.pruned + c.failed + c.cancelled;
}

}  // namespace dnnlab::server
