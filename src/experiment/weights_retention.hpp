// Which finished trials keep their trained weights: the rule, in one place.
// An experiment keeps the weights of its best K finished trials by its
// objective (the sweep's search.metric and mode) and of every trial the user
// pinned; the rest are dropped as soon as they fall out, so the store holds
// at most K + pinned files during the run, not only at its end.
//
//   WeightsRetention keep(store, WeightsRule::of(*entry.sweep));
//   if (keep.could_keep(trial_id, exp_id, metrics))            // cheap: no bytes
//     bytes = weights_file(run, model, params);                // training_run.hpp
//   ...the end is committed...
//   keep.offer(trial_id, bytes);   // kept or not, and whoever fell out dropped
//   keep.prune(exp_id);            // when the experiment ends
//
// Ranking: a trial without the metric ranks last; ties go to the lower trial
// id (the earlier one). Only finished, not provisional trials are offered
// (the lease service's and the gateway's business). Several writers offering
// at once may each keep one more for a moment; every offer drops down to the
// rule with what is committed, so the last one leaves K + pinned.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "store/result_store.hpp"
#include "sweep/sweep_spec.hpp"

namespace dnnlab::experiment {

struct WeightsRule {
  std::int64_t keep = 10;  // K (search.keep_weights); 0 keeps pinned trials' only
  std::string metric = "val_acc";
  bool maximize = true;
  static WeightsRule of(const sweep::SweepSpec& sweep);
};

class WeightsRetention {
 public:
  WeightsRetention(store::ResultStore& store, WeightsRule rule) : store_(store), rule_(rule) {}

  // Whether a trial of `experiment_id` that finished with `metrics` would be
  // kept now (pinned, or among the best K with those kept): ask before
  // serialising and sending a model's bytes.
  bool could_keep(std::int64_t trial_id, std::int64_t experiment_id,
                  const store::TrialMetrics& metrics);
  // The same against a list of kept files the caller read (a cache) and the
  // pin it knows: no store read.
  bool could_keep(std::int64_t trial_id, const store::TrialMetrics& metrics, bool pinned,
                  const std::vector<store::WeightsRecord>& kept) const;
  // Keeps `safetensors` as the trial's weights when the rule keeps it (by
  // the trial's stored metrics and pin) and drops the kept weights that
  // fall out. Returns whether the trial's are kept. The trial must exist.
  bool offer(std::int64_t trial_id, std::string_view safetensors);
  // Drops every kept file of the experiment the rule does not keep (an
  // unpinned trial, a smaller K): at the experiment's end. Returns how many.
  std::int64_t prune(std::int64_t experiment_id);

  const WeightsRule& rule() const { return rule_; }

 private:
  bool ranks_above(const store::TrialMetrics& a, std::int64_t a_id, const store::TrialMetrics& b,
                   std::int64_t b_id) const;
  // Of `kept` (plus nothing else), the trial ids the rule keeps.
  std::vector<std::int64_t> keepers(std::vector<store::WeightsRecord> kept) const;

  store::ResultStore& store_;
  WeightsRule rule_;
};

}  // namespace dnnlab::experiment
