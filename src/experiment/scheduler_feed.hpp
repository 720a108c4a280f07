// One experiment's early-stopping scheduler, fed from the store: every
// process that asks for a verdict (a native worker, the browser gateway)
// asks through one of these, so a verdict depends on the stored history
// only, not on which process asks.
//
//   experiment::SchedulerFeed feed(sweep, experiment_id);
//   if (!feed.verdict(store, {trial_id, index, epoch, epochs}, metrics, true)) prune();
//
// The feed keeps one SchedulerState (scheduler_state.hpp) per experiment and
// follows the store incrementally (ResultStore::curves_since: only the
// trials that events since its cursor name), so a verdict costs the same at
// 100,000 trials as at 1,000 (bench/sched_feed_bench.cpp). Before each
// verdict it catches up with the store, so two feeds (two processes, two
// connections) asked about the same point on the same stored history
// answer alike: ASHA ranks the value among every counted value at the rung,
// the median rule compares with every counted trial's running average over
// its full curve. Counted: a trial's current attempt, not provisional
// (browser epochs count once a native re-run verified them).
//
// Not thread-safe: one per experiment per thread (the lease service's catalogue owns it).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <utility>

#include "store/result_store.hpp"
#include "sweep/sweep_spec.hpp"

namespace dnnlab::experiment {

class SchedulerState;

// Where a trial is: (trial_id, index) after `epoch` of its `epochs`.
struct EpochPoint {
  std::int64_t trial_id = 0, index = 0;
  std::int64_t epoch = 0, epochs = 0;
};

class SchedulerFeed {
 public:
  SchedulerFeed(const sweep::SweepSpec& sweep, std::int64_t experiment_id);
  ~SchedulerFeed();
  SchedulerFeed(const SchedulerFeed&) = delete;
  SchedulerFeed& operator=(const SchedulerFeed&) = delete;

  // False stops the trial (pruned). The value is judged against the other
  // trials' counted epochs as the store holds them now (read first); the
  // value itself is never kept here: values count once stored and counted,
  // whoever asks, so both kinds of caller read the same history. `counts`:
  // a native worker's value (stored before it asks): the verdict is kept,
  // and a repeat of (trial, epoch) gets the first answer (idempotent, also
  // for a later attempt in this process, as a kept scheduler decision
  // was); false: a browser's (provisional until verified): judged, and
  // neither it nor its verdict kept, so a trial reissued after an abandoned
  // ticket is judged on its new value. The last epoch gets no verdict
  // (true): a trial that trained every epoch finished. A FIFO sweep never
  // stops a trial and reads nothing.
  bool verdict(store::ResultStore& store, const EpochPoint& at, const store::EpochMetrics& m,
               bool counts);
  // The trial ended; its values still count for the others.
  void on_finish(std::int64_t index);

  // Reads what changed in the store since the last read (verdict does this
  // first). Returns how many trials were read.
  std::size_t catch_up(store::ResultStore& store);

 private:
  const sweep::SweepSpec& sweep_;
  std::int64_t experiment_id_;
  std::unique_ptr<SchedulerState> state_;  // none for FIFO
  std::int64_t cursor_ = 0;                // the last event read (0: load everything)
  // Verdicts on counted values, by (trial id, epoch).
  std::map<std::pair<std::int64_t, std::int64_t>, bool> decided_;
};

}  // namespace dnnlab::experiment
