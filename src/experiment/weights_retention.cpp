// The weights retention rule (weights_retention.hpp).
#include "experiment/weights_retention.hpp"

#include <algorithm>

namespace dnnlab::experiment {

WeightsRule WeightsRule::of(const sweep::SweepSpec& sweep) {
  WeightsRule r;
  r.keep = sweep.search.keep_weights;
  r.metric = sweep.search.metric;
  r.maximize = sweep.search.maximize();
  return r;
}

bool WeightsRetention::ranks_above(const store::TrialMetrics& a, std::int64_t a_id,
                                   const store::TrialMetrics& b, std::int64_t b_id) const {
  const auto va = store::metric(a, rule_.metric);
  const auto vb = store::metric(b, rule_.metric);
  if (va && vb && *va != *vb) return rule_.maximize ? *va > *vb : *va < *vb;
  if (va.has_value() != vb.has_value()) return va.has_value();
  return a_id < b_id;
}

std::vector<std::int64_t> WeightsRetention::keepers(std::vector<store::WeightsRecord> kept) const {
  std::sort(kept.begin(), kept.end(), [&](const auto& a, const auto& b) {
    return ranks_above(a.metrics, a.trial_id, b.metrics, b.trial_id);
  });
  std::vector<std::int64_t> ids;
  for (std::size_t i = 0; i < kept.size(); ++i)
    if (kept[i].pinned ||
        (static_cast<std::int64_t>(i) < rule_.keep && store::metric(kept[i].metrics, rule_.metric)))
      ids.push_back(kept[i].trial_id);
  return ids;
}

bool WeightsRetention::could_keep(std::int64_t trial_id, std::int64_t experiment_id,
                                  const store::TrialMetrics& metrics) {
  if (rule_.keep > 0 && store::metric(metrics, rule_.metric) &&
      could_keep(trial_id, metrics, false, store_.weights_of(experiment_id)))
    return true;
  auto t = store_.trial(trial_id);  // only for a trial that ranks too low
  return t && t->pinned;
}

bool WeightsRetention::could_keep(std::int64_t trial_id, const store::TrialMetrics& metrics,
                                  bool pinned,
                                  const std::vector<store::WeightsRecord>& kept) const {
  if (pinned) return true;
  if (rule_.keep <= 0 || !store::metric(metrics, rule_.metric)) return false;
  std::int64_t above = 0;
  for (const store::WeightsRecord& w : kept)
    if (w.trial_id != trial_id && ranks_above(w.metrics, w.trial_id, metrics, trial_id)) ++above;
  return above < rule_.keep;
}

bool WeightsRetention::offer(std::int64_t trial_id, std::string_view safetensors) {
  auto t = store_.trial(trial_id);
  if (!t) throw std::invalid_argument("trial_id " + std::to_string(trial_id) + " does not exist");
  std::vector<store::WeightsRecord> kept = store_.weights_of(t->experiment_id);
  std::erase_if(kept, [&](const auto& w) { return w.trial_id == trial_id; });
  store::WeightsRecord self;
  self.trial_id = trial_id;
  self.metrics = t->metrics;
  self.pinned = t->pinned;
  kept.push_back(self);
  const std::vector<std::int64_t> ids = keepers(kept);
  const bool keep = std::find(ids.begin(), ids.end(), trial_id) != ids.end();
  if (!keep) return false;
  store_.put_weights(trial_id, safetensors);
  // What is committed now, this file included: drop whoever fell out.
  prune(t->experiment_id);
  return true;
}

std::int64_t WeightsRetention::prune(std::int64_t experiment_id) {
  std::vector<store::WeightsRecord> kept = store_.weights_of(experiment_id);
  const std::vector<std::int64_t> ids = keepers(kept);
  std::int64_t dropped = 0;
  for (const store::WeightsRecord& w : kept)
    if (std::find(ids.begin(), ids.end(), w.trial_id) == ids.end())
      dropped += store_.delete_weights(w.trial_id) ? 1 : 0;
  return dropped;
}

}  // namespace dnnlab::experiment
