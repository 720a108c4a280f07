// The scheduler fed from the store (scheduler_feed.hpp).
#include "experiment/scheduler_feed.hpp"

#include <cmath>

#include "experiment/scheduler_state.hpp"

namespace dnnlab::experiment {

SchedulerFeed::SchedulerFeed(const sweep::SweepSpec& sweep, std::int64_t experiment_id)
    : sweep_(sweep), experiment_id_(experiment_id) {
  if (sweep.scheduler.type != "fifo") state_ = std::make_unique<SchedulerState>(sweep);
}

SchedulerFeed::~SchedulerFeed() = default;

std::size_t SchedulerFeed::catch_up(store::ResultStore& store) {
  if (!state_) return 0;
  std::size_t n = 0;
  for (;;) {
    const store::CurveChanges changes = store.curves_since(experiment_id_, cursor_);
    for (const store::TrialCurve& t : changes.trials) state_->update(t);
    n += changes.trials.size();
    cursor_ = changes.cursor;
    if (!changes.more) return n;
  }
}

bool SchedulerFeed::verdict(store::ResultStore& store, const EpochPoint& at,
                            const store::EpochMetrics& m, bool counts) {
  if (!state_ || at.epoch >= at.epochs || !state_->judges(at.epoch)) return true;
  const auto key = std::make_pair(at.trial_id, at.epoch);
  if (counts)
    if (auto it = decided_.find(key); it != decided_.end()) return it->second;
  catch_up(store);
  const double value = store::metric(m, sweep_.search.metric).value_or(NAN);
  const bool go = state_->verdict(at.trial_id, at.epoch, value);
  if (counts) decided_.emplace(key, go);
  return go;
}

void SchedulerFeed::on_finish(std::int64_t /*index*/) {
  // Nothing to forget: a trial's stored values count for the others after it ends.
}

}  // namespace dnnlab::experiment
