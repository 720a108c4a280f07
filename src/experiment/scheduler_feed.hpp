// One experiment's early-stopping scheduler (sweep/scheduler.hpp), fed from
// the store: every process that asks for a verdict (a native worker, the
// browser gateway) asks through one of these, so a verdict depends on the
// stored history only, not on which process asks.
//
//   experiment::SchedulerFeed feed(sweep, experiment_id);
//   if (!feed.verdict(store, {trial_id, index, epoch, epochs}, metrics, true)) prune();
//
// Not thread-safe: one per experiment per thread (the lease service's catalogue owns it).
#pragma once
#include <cstdint>
#include <memory>

#include "store/result_store.hpp"
#include "sweep/scheduler.hpp"
#include "sweep/sweep_spec.hpp"

namespace dnnlab::experiment {

// Where a trial is: (trial_id, index) after `epoch` of its `epochs`.
struct EpochPoint {
  std::int64_t trial_id = 0, index = 0;
  std::int64_t epoch = 0, epochs = 0;
};

class SchedulerFeed {
 public:
  SchedulerFeed(const sweep::SweepSpec& sweep, std::int64_t experiment_id);

  // False stops the trial (pruned). The counted epochs of the other trials
  // (native, or browser ones a re-run verified) are read from the store
  // first. `counts`: the value joins the scheduler's history (a native
  // worker's); false: it is only judged against it (a browser's, provisional
  // until verified: its numbers move nothing). The last epoch gets no verdict
  // (true): a trial that trained every epoch finished. A FIFO sweep never
  // stops a trial and reads nothing.
  bool verdict(store::ResultStore& store, const EpochPoint& at, const store::EpochMetrics& m,
               bool counts);
  // The trial ended; its values still count for the others.
  void on_finish(std::int64_t index);

 private:
  const sweep::SweepSpec& sweep_;
  std::int64_t experiment_id_;
  std::unique_ptr<sweep::Scheduler> scheduler_;
};

}  // namespace dnnlab::experiment
