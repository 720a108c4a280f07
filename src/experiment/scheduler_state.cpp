// An experiment's stored history, indexed for ASHA and the median rule
// (scheduler_state.hpp).
#include "experiment/scheduler_state.hpp"

#include <algorithm>
#include <cmath>
#include <ext/pb_ds/assoc_container.hpp>
#include <ext/pb_ds/tree_policy.hpp>
#include <limits>
#include <optional>
#include <stdexcept>

#include "sweep/scheduler.hpp"

namespace dnnlab::experiment {

// Values of one epoch, ordered best first by (key, trial id), each with its
// raw value: rank and k-th element in O(log N) (libstdc++'s policy tree;
// std::multiset would make a rank O(N)).
class SchedulerState::Ranked {
 public:
  using Key = std::pair<double, std::int64_t>;

  void insert(const Key& k, double raw) { tree_.insert({k, raw}); }
  void erase(const Key& k) { tree_.erase(k); }
  bool contains(const Key& k) const { return tree_.find(k) != tree_.end(); }
  std::size_t size() const { return tree_.size(); }
  // How many keys are strictly better (smaller) than `key`, of any trial.
  std::size_t better_than(double key) const {
    return tree_.order_of_key({key, std::numeric_limits<std::int64_t>::min()});
  }
  // The rank (0-based) `k` has or would have.
  std::size_t rank_of(const Key& k) const { return tree_.order_of_key(k); }
  // The raw value of the k-th best (0-based).
  double raw_at(std::size_t k) const { return tree_.find_by_order(k)->second; }

 private:
  __gnu_pbds::tree<Key, double, std::less<Key>, __gnu_pbds::rb_tree_tag,
                   __gnu_pbds::tree_order_statistics_node_update>
      tree_;
};

SchedulerState::SchedulerState(const sweep::SweepSpec& sweep)
    : asha_(sweep.scheduler.type == "asha"),
      maximize_(sweep.search.maximize()),
      metric_(sweep.search.metric) {
  const sweep::SchedulerSpec& s = sweep.scheduler;
  if (asha_) {
    // The rungs exactly as the in-memory scheduler places them.
    rungs_ =
        sweep::AshaScheduler(maximize_, s.min_epochs, s.reduction_factor, sweep.max_epochs).rungs();
    eta_ = s.reduction_factor;
  } else if (s.type == "median") {
    grace_ = s.grace_epochs;
  } else {
    throw std::invalid_argument("SchedulerState: no state for scheduler '" + s.type + "'");
  }
}

SchedulerState::~SchedulerState() = default;

double SchedulerState::key(double value) const {
  if (std::isnan(value)) return std::numeric_limits<double>::infinity();
  return maximize_ ? -value : value;
}

bool SchedulerState::judges(std::int64_t epoch) const {
  return asha_ ? std::binary_search(rungs_.begin(), rungs_.end(), epoch) : epoch >= grace_;
}

std::vector<std::pair<std::int64_t, double>> SchedulerState::contributions(const Trial& t) const {
  std::vector<std::pair<std::int64_t, double>> out;
  if (asha_) {
    for (const auto& [epoch, v] : t.values)
      if (judges(epoch)) out.emplace_back(epoch, v);
    return out;
  }
  // The running average over the stored epochs 1..e (a NaN makes it NaN).
  double sum = 0;
  std::int64_t n = 0;
  for (const auto& [epoch, v] : t.values) {
    sum += v;
    ++n;
    if (judges(epoch)) out.emplace_back(epoch, sum / static_cast<double>(n));
  }
  return out;
}

void SchedulerState::add(std::int64_t trial_id, const Trial& t, bool insert) {
  if (!t.counted) return;
  for (const auto& [epoch, v] : contributions(t)) {
    std::unique_ptr<Ranked>& r = by_epoch_[epoch];
    if (!r) r = std::make_unique<Ranked>();
    if (insert)
      r->insert({key(v), trial_id}, v);
    else
      r->erase({key(v), trial_id});
  }
}

void SchedulerState::update(const store::TrialCurve& trial) {
  Trial next;
  next.counted = !trial.provisional;
  for (const store::EpochMetrics& m : trial.curve)
    if (auto v = store::metric(m, metric_)) next.values.emplace_back(m.epoch, *v);
  std::sort(next.values.begin(), next.values.end());
  auto it = trials_.find(trial.trial_id);
  if (it != trials_.end()) {
    add(trial.trial_id, it->second, false);
    it->second = std::move(next);
  } else {
    it = trials_.emplace(trial.trial_id, std::move(next)).first;
  }
  add(trial.trial_id, it->second, true);
}

bool SchedulerState::verdict(std::int64_t trial_id, std::int64_t epoch, double value) const {
  if (!judges(epoch)) return true;
  return asha_ ? asha_verdict(trial_id, epoch, value) : median_verdict(trial_id, epoch, value);
}

std::optional<std::pair<double, std::int64_t>> SchedulerState::own_entry(std::int64_t trial_id,
                                                                         std::int64_t epoch) const {
  auto t = trials_.find(trial_id);
  auto r = by_epoch_.find(epoch);
  if (t == trials_.end() || !t->second.counted || r == by_epoch_.end()) return std::nullopt;
  for (const auto& [e, v] : contributions(t->second))
    if (e == epoch && r->second->contains({key(v), trial_id}))
      return std::make_pair(key(v), trial_id);
  return std::nullopt;
}

bool SchedulerState::asha_verdict(std::int64_t trial_id, std::int64_t epoch, double value) const {
  std::size_t others = 0, ahead = 0;
  if (auto r = by_epoch_.find(epoch); r != by_epoch_.end()) {
    const double k = key(value);
    others = r->second->size();
    ahead = r->second->better_than(k);
    if (auto own = own_entry(trial_id, epoch)) {
      --others;
      if (own->first < k) --ahead;
    }
  }
  return sweep::asha_continues(ahead, others + 1, eta_, std::isnan(value));
}

bool SchedulerState::median_verdict(std::int64_t trial_id, std::int64_t epoch, double value) const {
  auto r = by_epoch_.find(epoch);
  if (r == by_epoch_.end()) return true;
  const Ranked& ranked = *r->second;
  // The trial's best so far: its stored epochs before this one, then `value`.
  double best = std::numeric_limits<double>::quiet_NaN();
  if (auto t = trials_.find(trial_id); t != trials_.end())
    for (const auto& [e, v] : t->second.values)
      if (e < epoch && (std::isnan(best) || sweep::better(v, best, maximize_))) best = v;
  const auto own = own_entry(trial_id, epoch);
  if (std::isnan(best) || sweep::better(value, best, maximize_)) best = value;
  // The others' k-th best skips the trial's own entry.
  const std::size_t others = ranked.size() - (own ? 1 : 0);
  if (static_cast<std::int64_t>(others) < min_others_) return true;
  const std::size_t own_rank = own ? ranked.rank_of(*own) : others;
  auto other_at = [&](std::size_t k) { return ranked.raw_at(k >= own_rank ? k + 1 : k); };
  const double median =
      others % 2 ? other_at(others / 2) : 0.5 * (other_at(others / 2 - 1) + other_at(others / 2));
  return !sweep::better(median, best, maximize_);
}

}  // namespace dnnlab::experiment
