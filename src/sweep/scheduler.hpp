// Schedulers stop unpromising trials early, epoch by epoch:
//
//   FifoScheduler            never stops a trial;
//   AshaScheduler            asynchronous successive halving (Li et al. 2018):
//                            rungs at min_epochs * eta^k epochs below the last
//                            epoch; at a rung a trial goes on only if its
//                            metric is in the top 1/eta of the values recorded
//                            at that rung so far (at least the best one);
//   MedianStoppingScheduler  the median rule (Golovin et al. 2017, Vizier):
//                            from grace_epochs on, stop a trial whose best
//                            value so far is worse than the median of the
//                            other trials' running averages at that epoch,
//                            once at least 3 other trials reached it.
//
//   auto scheduler = make_scheduler(sweep);
//   if (scheduler->on_epoch(trial, epoch, val_acc) == Decision::kStop) stop(trial);
//
// Restarts: on_epoch is idempotent per (trial, epoch) — a repeat returns the
// decision given the first time and changes nothing. A coordinator that
// restarts rebuilds a scheduler with replay(), feeding every stored
// per-epoch metric in the order they were first reported (e.g. by the
// store's sequence number); decisions then continue exactly as before.
// Decisions depend on arrival order (that is what "asynchronous" means), so
// replaying in another order may give other decisions for the past but never
// changes a stored decision: trust the store for those.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "sweep/sweep_spec.hpp"

namespace dnnlab::sweep {

enum class Decision { kContinue, kStop };

// The rules themselves, as pure functions, so that the schedulers below and
// experiment::SchedulerFeed (which keeps an experiment's stored history
// indexed instead of replaying it) decide alike.
// a better than b under the mode; NaN is worse than anything.
bool better(double a, double b, bool maximize);
// ASHA at a rung: a value goes on when fewer than max(1, n / eta) of the n
// values recorded there (its own included) are better; NaN never does.
bool asha_continues(std::size_t better_than_it, std::size_t recorded, int64_t eta, bool is_nan);

class Scheduler {
 public:
  explicit Scheduler(bool maximize) : maximize_(maximize) {}
  virtual ~Scheduler() = default;

  // A trial's metric after `epoch` (1-based) epochs. NaN counts as the worst value.
  Decision on_epoch(int64_t trial, int64_t epoch, double value);
  // The trial ended (finished, stopped or failed). Its recorded values still
  // count for the others.
  virtual void on_finish(int64_t trial) {}
  // Rebuilding after a restart: the same as on_epoch, the decision dropped.
  void replay(int64_t trial, int64_t epoch, double value) { (void)on_epoch(trial, epoch, value); }

  bool maximize() const { return maximize_; }

 protected:
  // Decides for a (trial, epoch) seen for the first time.
  virtual Decision decide(int64_t trial, int64_t epoch, double value) = 0;
  // a better than b under the mode; NaN is worse than anything.
  bool better(double a, double b) const;

 private:
  bool maximize_;
  std::map<std::pair<int64_t, int64_t>, Decision> decided_;
};

class FifoScheduler : public Scheduler {
 public:
  using Scheduler::Scheduler;

 protected:
  Decision decide(int64_t, int64_t, double) override { return Decision::kContinue; }
};

class AshaScheduler : public Scheduler {
 public:
  // max_epochs: trials end there anyway, so no rung at or above it (0 = no limit).
  AshaScheduler(bool maximize, int64_t min_epochs, int64_t reduction_factor, int64_t max_epochs);
  // The rung epochs: min_epochs * eta^k below max_epochs (up to 64 without a limit).
  const std::vector<int64_t>& rungs() const { return rungs_; }

 protected:
  Decision decide(int64_t trial, int64_t epoch, double value) override;

 private:
  int64_t eta_;
  std::vector<int64_t> rungs_;
  std::map<int64_t, std::vector<double>> recorded_;  // rung epoch -> values so far
};

class MedianStoppingScheduler : public Scheduler {
 public:
  MedianStoppingScheduler(bool maximize, int64_t grace_epochs, int64_t min_others = 3);

 protected:
  Decision decide(int64_t trial, int64_t epoch, double value) override;

 private:
  int64_t grace_;
  int64_t min_others_;
  std::map<int64_t, std::map<int64_t, double>> curves_;  // trial -> epoch -> value
};

// The scheduler the sweep's `scheduler:` section names, with the search's mode
// and the sweep's max_epochs.
std::unique_ptr<Scheduler> make_scheduler(const SweepSpec& sweep);

}  // namespace dnnlab::sweep
