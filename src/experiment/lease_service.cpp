// The lease service (lease_service.hpp): every rule of a trial's life on
// the one who runs it.
#include "experiment/lease_service.hpp"

#include <chrono>
#include <iostream>
#include <stdexcept>

#include "db/task_codec.hpp"
#include "experiment/weights_retention.hpp"

namespace dnnlab::experiment {

namespace {
double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

LeaseService::LeaseService(store::ResultStore& store, queue::TaskQueue& queue, Catalogue& catalogue,
                           LeaseServiceOptions options)
    : store_(store),
      queue_(queue),
      catalogue_(catalogue),
      o_(std::move(options)),
      epochs_since_(steady_seconds()) {}

bool LeaseService::ack(const queue::TaskLease& t) {
  if (o_.on_release) o_.on_release(t);
  return queue_.ack(t);
}

bool LeaseService::nack(const queue::TaskLease& t, bool requeue, const std::string& why) {
  if (o_.on_release) o_.on_release(t);
  return queue_.nack(t, requeue, why);
}

LeaseService::Got LeaseService::lease(std::int64_t exp, const std::string& worker_id,
                                      double seconds, TrialLease& out) {
  catalogue_.get(exp);  // gone: throws before anything is leased
  auto task_lease = queue_.lease(db::queue_name(exp), worker_id, seconds);
  if (!task_lease) return Got::kNone;
  TrialLease l;
  l.worker = worker_id;
  l.task = std::move(*task_lease);
  db::TrialTask task;
  try {
    task = db::decode_task(l.task.payload);
  } catch (const db::ProtocolError& e) {
    nack(l.task, false, e.what());  // dead-lettered: no delivery can read it
    return Got::kSkipped;
  }
  // The store's attempt: newer than any earlier run of a reopened trial.
  l.attempt = task.attempt(l.task.attempt);
  if (!task.config_json.empty()) {
    // The task carries the trial's values: no store read. Whether the
    // trial still waits for this attempt is mark_running's answer (start).
    l.trial.id = task.trial_id;
    l.trial.experiment_id = task.experiment_id;
    l.trial.index = task.index;
    l.trial.config_json = std::move(task.config_json);
    l.trial.seed = task.seed;
  } else {
    auto trial = store_.trial(task.trial_id);
    if (!trial || (trial->status != store::TrialStatus::queued &&
                   trial->status != store::TrialStatus::running)) {
      ack(l.task);  // already ended (a duplicate delivery) or gone
      return Got::kSkipped;
    }
    l.trial = std::move(*trial);
  }
  try {
    l.run = catalogue_.run_spec(l.trial);
  } catch (const std::invalid_argument&) {
    throw;  // the experiment is gone: the caller moves on
  } catch (const std::exception& e) {
    fail(std::move(l), e.what());
    return Got::kSkipped;
  }
  out = std::move(l);
  return Got::kLeased;
}

bool LeaseService::start(TrialLease& l, const nlohmann::json& provenance) {
  try {
    l.started = store_.mark_running(l.trial.id, l.attempt, l.worker, provenance);
  } catch (const std::invalid_argument&) {
    l.started = false;  // the trial is gone (its experiment deleted)
  }
  if (!l.started) ack(l.task);
  return l.started;
}

std::vector<bool> LeaseService::start_all(const std::vector<TrialLease*>& leases,
                                          const std::vector<const nlohmann::json*>& provenance) {
  store::ResultBatch batch;
  for (std::size_t i = 0; i < leases.size(); ++i)
    batch.starts.push_back(
        {leases[i]->trial.id, leases[i]->attempt, leases[i]->worker, *provenance[i]});
  std::vector<bool> started;
  try {
    started = store_.record_results(batch).starts;
  } catch (const std::invalid_argument&) {
    // A trial is gone: one by one, so that only its start is refused.
    started.clear();
    for (std::size_t i = 0; i < leases.size(); ++i)
      started.push_back(start(*leases[i], *provenance[i]));
    return started;
  }
  for (std::size_t i = 0; i < leases.size(); ++i) {
    leases[i]->started = started[i];
    if (!started[i]) ack(leases[i]->task);
  }
  return started;
}

bool LeaseService::epochs_due() const {
  return !epochs_.empty() &&
         (epochs_.size() >= kFlushRows || steady_seconds() - epochs_since_ >= kFlushSeconds);
}

bool LeaseService::flush_epochs(const TrialLease* l) {
  if (epochs_.empty()) return true;
  store::ResultBatch batch;
  batch.epochs.swap(epochs_);
  const store::BatchOutcome out = store_.record_results(batch);
  epochs_since_ = steady_seconds();
  for (std::size_t i = 0; l && i < out.epochs.size(); ++i)
    if (!out.epochs[i] && batch.epochs[i].trial_id == l->trial.id &&
        batch.epochs[i].attempt == l->attempt)
      return false;
  return true;
}

bool LeaseService::flush_epochs_if_due(const TrialLease& l) {
  return !epochs_due() || flush_epochs(&l);
}

LeaseService::Verdict LeaseService::report_epoch(TrialLease& l, const store::EpochMetrics& m,
                                                 bool counts, bool write_now) {
  Verdict v;
  ExperimentEntry& e = catalogue_.get(l.trial.experiment_id);
  const std::int64_t epochs = l.run.train.epochs;
  if (o_.hold_last_epoch && m.epoch >= epochs) {
    l.last_epoch = m;
  } else {
    epochs_.push_back({l.trial.id, l.attempt, m});
    // A scheduler that compares trials reads the others' epochs from the
    // store: ours must be there as soon as theirs are.
    if (write_now || e.sweep->scheduler.type != "fifo" || epochs_due()) v.lost = !flush_epochs(&l);
    if (v.lost) return v;  // a newer attempt owns the trial
  }
  v.go = e.scheduler->verdict(store_, {l.trial.id, l.trial.index, m.epoch, epochs}, m, counts);
  return v;
}

bool LeaseService::extend(TrialLease& l, double seconds) {
  return queue_.extend(l.task, seconds);
}

bool LeaseService::keep_alive(TrialLease& l) {
  return queue_.keep_alive(l.task);
}

void LeaseService::finish(TrialLease&& l, store::TrialStatus status,
                          const store::TrialMetrics& metrics, std::string error, bool provisional,
                          std::string weights) {
  if (status != store::TrialStatus::failed)
    catalogue_.get(l.trial.experiment_id).scheduler->on_finish(l.trial.index);
  PendingEnd p;
  p.end = {l.trial.id, l.attempt, status, metrics, std::move(error)};
  p.provisional = provisional;
  if (status == store::TrialStatus::finished && !provisional) p.weights = std::move(weights);
  p.lease = std::move(l);
  ends_.push_back(std::move(p));
}

void LeaseService::fail(TrialLease&& l, const std::string& error) {
  // Started first (ended ones count once, under an attempt); refused: a
  // newer attempt owns it, and start() acked the task.
  if (!l.started && !start(l, nlohmann::json::object())) return;
  finish(std::move(l), store::TrialStatus::failed, {}, error);
}

bool LeaseService::wants_weights(const TrialLease& l, const store::TrialMetrics& metrics) {
  ExperimentEntry& e = catalogue_.get(l.trial.experiment_id);
  const WeightsRetention rule(store_, WeightsRule::of(*e.sweep));
  if (l.trial.pinned) return true;
  if (rule.rule().keep <= 0) return false;
  KeptCache& c = kept_cache_[l.trial.experiment_id];
  const double now = steady_seconds();
  if (now - c.read_at > 1.0) {
    c.kept = store_.weights_of(l.trial.experiment_id);
    c.read_at = now;
  }
  return rule.could_keep(l.trial.id, metrics, false, c.kept);
}

bool LeaseService::offer_weights(std::int64_t experiment_id, std::int64_t trial_id,
                                 std::string_view safetensors) {
  kept_cache_.erase(experiment_id);  // what this process keeps, the next ask sees
  ExperimentEntry& e = catalogue_.get(experiment_id);
  return WeightsRetention(store_, WeightsRule::of(*e.sweep)).offer(trial_id, safetensors);
}

std::vector<bool> LeaseService::commit() {
  if (ends_.empty() && epochs_.empty()) return {};
  store::ResultBatch batch;
  batch.epochs = epochs_;
  for (const PendingEnd& p : ends_) {
    if (p.lease.last_epoch)
      batch.epochs.push_back({p.end.trial_id, p.end.attempt, *p.lease.last_epoch});
    batch.ends.push_back(p.end);
  }
  store::BatchOutcome out;
  struct Offer {
    std::size_t end;  // in batch.ends
    std::int64_t experiment_id;
    std::string weights;
  };
  std::vector<Offer> offers;  // offered once their ends committed
  // Acked only once the results are stored (one commit with them when the
  // queue shares the store's file): a process that dies in between leaves
  // tasks whose trials ended, and their redelivery is acked as a duplicate
  // (lease). One ack batch is one broker commit.
  queue_.write_together([&] {
    for (const PendingEnd& p : ends_)
      if (p.provisional) store_.set_provisional(p.end.trial_id, p.end.attempt, true);
    out = store_.record_results(batch);
    epochs_.clear();
    epochs_since_ = steady_seconds();
    std::vector<PendingEnd> ends;
    ends.swap(ends_);
    std::vector<queue::TaskLease> tasks;
    tasks.reserve(ends.size());
    for (std::size_t i = 0; i < ends.size(); ++i)
      if (!ends[i].weights.empty())
        offers.push_back({i, ends[i].lease.trial.experiment_id, std::move(ends[i].weights)});
    for (PendingEnd& p : ends) {
      if (o_.on_release) o_.on_release(p.lease.task);
      tasks.push_back(std::move(p.lease.task));
    }
    if (!tasks.empty()) queue_.ack_batch(tasks);
  });
  // The weights of the ends that counted, after their commit: a file the
  // store refuses (too large, a store error) costs the trial its weights,
  // never its result.
  for (const Offer& o : offers) {
    if (!out.ends[o.end]) continue;
    const store::TrialEnd& end = batch.ends[o.end];
    try {
      offer_weights(o.experiment_id, end.trial_id, o.weights);
    } catch (const std::exception& e) {
      std::cerr << "trial " << end.trial_id << ": its weights were not kept: " << e.what() << "\n";
    }
  }
  return out.ends;
}

void LeaseService::give_back(const TrialLease& l) {
  if (o_.on_release) o_.on_release(l.task);
  queue_.write_together([&] {
    if (!queue_.ack(l.task)) return;  // lost: the queue has redelivered it
    if (l.started) store_.release_trial(l.trial.id, l.attempt);
    // Published again as the attempt it reached: the next lease runs a newer one.
    db::TrialTask task{l.trial.experiment_id, l.trial.id,  l.trial.index, l.attempt,
                       l.trial.config_json,   l.trial.seed};
    queue_.publish(db::queue_name(l.trial.experiment_id), db::encode_task(task));
  });
}

void LeaseService::lost(const TrialLease& l) {
  if (o_.on_release) o_.on_release(l.task);
}

void LeaseService::fail_queued(std::int64_t trial_id, const std::string& worker_id,
                               const std::string& error) {
  auto trial = store_.trial(trial_id);
  if (!trial || trial->status != store::TrialStatus::queued) return;  // running again, or ended
  if (store_.mark_running(trial_id, trial->attempt + 1, worker_id))
    store_.finish_trial(trial_id, trial->attempt + 1, store::TrialStatus::failed, {}, error);
}

std::int64_t LeaseService::reopen_trials_of(const std::vector<std::string>& worker_ids) {
  std::int64_t reopened = 0;
  for (const auto& e : store_.experiments()) {
    std::vector<std::string> payloads;
    for (const auto& w : worker_ids) {
      store::TrialQuery q;
      q.worker = w;
      q.limit = 0;
      for (const auto& t : store_.trials(e.id, q)) {
        if (t.status != store::TrialStatus::finished && t.status != store::TrialStatus::pruned &&
            t.status != store::TrialStatus::failed)
          continue;
        if (auto attempt = store_.reopen_trial(t.id)) {
          store_.delete_weights(t.id);  // they came with the result not trusted any more
          db::TrialTask task{e.id, t.id, t.index, *attempt, t.config_json, t.seed};
          payloads.push_back(db::encode_task(task));
        }
      }
    }
    if (payloads.empty()) continue;
    reopened += static_cast<std::int64_t>(payloads.size());
    queue_.publish_batch(db::queue_name(e.id), payloads);
    if (e.status != store::ExperimentStatus::running)
      store_.set_status(e.id, store::ExperimentStatus::running);
    catalogue_.relist();
  }
  return reopened;
}

}  // namespace dnnlab::experiment
