// The scheduler fed from the store (scheduler_feed.hpp).
#include "experiment/scheduler_feed.hpp"

#include <cmath>

namespace dnnlab::experiment {

SchedulerFeed::SchedulerFeed(const sweep::SweepSpec& sweep, std::int64_t experiment_id)
    : sweep_(sweep), experiment_id_(experiment_id), scheduler_(sweep::make_scheduler(sweep)) {}

bool SchedulerFeed::verdict(store::ResultStore& store, const EpochPoint& at,
                            const store::EpochMetrics& m, bool counts) {
  if (sweep_.scheduler.type == "fifo") return true;
  // A value that must not count is judged by a scratch scheduler that forgets it again.
  std::unique_ptr<sweep::Scheduler> scratch;
  sweep::Scheduler& s = counts ? *scheduler_ : *(scratch = sweep::make_scheduler(sweep_));
  const std::string& metric = sweep_.search.metric;
  for (const auto& te : store.epochs_for(experiment_id_, at.epoch))
    if (te.trial_id != at.trial_id)
      if (auto v = store::metric(te.metrics, metric)) s.replay(te.trial_index, at.epoch, *v);
  const double value = store::metric(m, metric).value_or(NAN);
  if (at.epoch >= at.epochs) {
    s.replay(at.index, at.epoch, value);  // counts for the others, stops nothing
    return true;
  }
  return s.on_epoch(at.index, at.epoch, value) != sweep::Decision::kStop;
}

void SchedulerFeed::on_finish(std::int64_t index) { scheduler_->on_finish(index); }

}  // namespace dnnlab::experiment
