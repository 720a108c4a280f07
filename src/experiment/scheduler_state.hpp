// The stored history an experiment's early-stopping rule judges against,
// kept indexed: every trial's counted curve (current attempt, not
// provisional, as ResultStore::curves_since reports it), the values at each
// ASHA rung and every trial's running average at each epoch in
// order-statistic trees. A verdict is then a few O(log N) look-ups, however
// many trials the experiment has; a trial's update costs O(E log N) for its
// E epochs.
//
//   SchedulerState state(sweep);
//   for (const auto& t : store.curves_since(exp, cursor).trials) state.update(t);
//   if (!state.verdict(trial_id, epoch, val_acc)) stop();
//
// The verdict is a function of the history held and the value judged only,
// never of the order in which trials were updated: two states given the
// same trials (in two processes, from two connections) answer alike.
// Nothing judged is kept. Not thread-safe.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "store/result_store.hpp"
#include "sweep/sweep_spec.hpp"

namespace dnnlab::experiment {

class SchedulerState {
 public:
  // An ASHA or median sweep (sweep.scheduler.type); FIFO has no state.
  explicit SchedulerState(const sweep::SweepSpec& sweep);
  ~SchedulerState();
  SchedulerState(const SchedulerState&) = delete;
  SchedulerState& operator=(const SchedulerState&) = delete;

  // The trial as the store holds it now; replaces what was known of it.
  void update(const store::TrialCurve& trial);

  // Whether trial `trial_id` goes on after `epoch` with `value` (NaN: the
  // worst), judged against the other trials' counted values:
  //   ASHA: at a rung epoch, `value` ranks in the top 1/eta of the others'
  //   values there and itself (at least the best goes on); off the rungs, true.
  //   median: from grace_epochs on, with at least 3 others at `epoch`, the
  //   trial's best value so far (its stored epochs before `epoch`, then
  //   `value`) is not worse than the median of the others' running averages
  //   over their epochs 1..`epoch`.
  bool verdict(std::int64_t trial_id, std::int64_t epoch, double value) const;

  // Whether `epoch` can stop a trial at all (an ASHA rung, or at/after the
  // median rule's grace period): other epochs need no history.
  bool judges(std::int64_t epoch) const;

  std::size_t trials() const { return trials_.size(); }

  // Order statistics over (goodness key, trial id); defined in the .cpp.
  class Ranked;

 private:
  struct Trial {
    bool counted = false;
    std::vector<std::pair<std::int64_t, double>> values;  // (epoch, metric), by epoch
  };
  // What `t` adds to the trees (ASHA: its values at the rungs; median: its
  // running average at every epoch it has), each (epoch, value).
  std::vector<std::pair<std::int64_t, double>> contributions(const Trial& t) const;
  void add(std::int64_t trial_id, const Trial& t, bool insert);
  double key(double value) const;  // smaller is better; NaN the worst
  // The entry trial `trial_id` itself holds at `epoch`, if any: a trial is
  // judged against the others only.
  std::optional<std::pair<double, std::int64_t>> own_entry(std::int64_t trial_id,
                                                           std::int64_t epoch) const;
  bool asha_verdict(std::int64_t trial_id, std::int64_t epoch, double value) const;
  bool median_verdict(std::int64_t trial_id, std::int64_t epoch, double value) const;

  bool asha_;
  bool maximize_;
  std::string metric_;
  std::int64_t eta_ = 3, grace_ = 1, min_others_ = 3;
  std::vector<std::int64_t> rungs_;
  std::unordered_map<std::int64_t, Trial> trials_;
  std::unordered_map<std::int64_t, std::unique_ptr<Ranked>> by_epoch_;  // epoch -> ranked values
};

}  // namespace dnnlab::experiment
