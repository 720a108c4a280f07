#include "experiment/coordinator.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <nlohmann/json.hpp>
#include <unordered_set>

#include "db/task_codec.hpp"
#include "experiment/build_provenance.hpp"
#include "experiment/weights_retention.hpp"

namespace dnnlab::experiment {

namespace {

constexpr int64_t kBacklog = 2048;

bool ended(store::TrialStatus s) {
  return s != store::TrialStatus::queued && s != store::TrialStatus::running;
}

}  // namespace

int64_t Coordinator::submit(store::ResultStore& store, queue::TaskQueue&, const std::string& text,
                            const std::string& path, SubmitMode mode) {
  sweep::SweepSpec sweep = sweep::parse_sweep(text, path);  // throws before anything is written
  if (mode != SubmitMode::kNew) {
    auto old = store.find_experiment(sweep.name, store::spec_hash(text));
    if (old && old->status == store::ExperimentStatus::running) return old->id;
    if (old && mode == SubmitMode::kReuseIfSame &&
        old->status != store::ExperimentStatus::cancelled)
      return old->id;
  }
  return create(store, sweep, text, path);
}

int64_t Coordinator::create(store::ResultStore& store, const sweep::SweepSpec& sweep,
                            const std::string& text, const std::string& path) {
  store::ExperimentRecord e;
  e.name = sweep.name;
  e.spec_text = text;
  e.spec_path = path;
  e.method = sweep.search.method;
  e.provenance = build_provenance();
  return store.create_experiment(e);
}

Coordinator::Coordinator(store::ResultStore& store, queue::TaskQueue& queue, int64_t id,
                         std::string holder)
    : Coordinator(store, queue, id, nullptr, std::move(holder)) {}

Coordinator::Coordinator(store::ResultStore& store, queue::TaskQueue& queue, int64_t id,
                         std::unique_ptr<sweep::SweepSpec> parsed, std::string holder)
    : store_(store), queue_(queue), id_(id), holder_(std::move(holder)) {
  auto e = store_.experiment(id);
  if (!e) throw std::invalid_argument("experiment " + std::to_string(id) + " does not exist");
  sweep_ = parsed
               ? std::move(parsed)
               : std::make_unique<sweep::SweepSpec>(sweep::parse_sweep(e->spec_text, e->spec_path));
  sampler_ = sweep::make_sampler(sweep_->search);
  if (holder_.empty()) {
    static std::atomic<int> made{0};
    char host[256] = "host";
    gethostname(host, sizeof host - 1);
    holder_ = std::string(host) + "-" + std::to_string(getpid()) + "-" + std::to_string(++made);
  }
  hold();
  rate_t0_ = std::chrono::steady_clock::now();
}

Coordinator::~Coordinator() {
  if (!holding_) return;
  try {
    store_.release_coordinator(id_, holder_);
  } catch (const std::exception&) {
    // It expires by itself.
  }
}

bool Coordinator::hold() {
  const auto now = std::chrono::steady_clock::now();
  if (holding_ && now - renewed_ < kCoordinatorLease / 4) return true;
  const bool was_holding = holding_;
  holding_ = store_.acquire_coordinator(id_, holder_, kCoordinatorLease.count());
  if (holding_) renewed_ = now;
  if (holding_ && !was_holding) rebuild();  // first, or taken over: what did the others do?
  return holding_;
}

void Coordinator::rebuild() {
  sampler_ = sweep::make_sampler(sweep_->search);
  observed_.clear();
  exhausted_ = false;
  // Rebuild the sampler from what the store holds (a restart or --resume).
  store::TrialQuery all;
  all.limit = 0;
  std::vector<store::TrialRecord> trials = store_.trials(id_, all);
  int64_t unended = 0;
  for (const auto& t : trials) {
    sampler_->resume({t.index, nlohmann::json::parse(t.config_json), t.seed});
    if (ended(t.status)) {
      if (t.provisional) continue;  // observed once verified
      if (auto v = store::metric(t.metrics, sweep_->search.metric)) sampler_->observe(t.index, *v);
      observed_.insert(t.id);
    } else {
      ++unended;
    }
  }
  generated_ = static_cast<int64_t>(trials.size());
  // Trials are stored before their tasks are published; a coordinator killed
  // between the two leaves trials without a task, and the queue cannot say
  // which (AMQP counts no leased or done tasks). The store can: republish
  // the queued trials above the published mark, and the queued ones that
  // ran before (given back or reopened: their task's fate is unknown). A
  // task published twice is harmless: mark_running runs one attempt once.
  if (store_.experiment(id_)->status == store::ExperimentStatus::running) {
    const int64_t published = store_.experiment(id_)->published_index;
    std::vector<std::string> payloads;
    int64_t top = published;
    for (const auto& t : trials) {
      if (t.status != store::TrialStatus::queued || (t.index <= published && t.attempt == 0))
        continue;
      payloads.push_back(db::encode_task({id_, t.id, t.index, t.attempt, t.config_json, t.seed}));
      top = std::max(top, t.index);
    }
    if (!payloads.empty()) {
      queue_.write_together([&] {
        queue_.publish_batch(db::queue_name(id_), payloads);
        store_.set_published(id_, top);
      });
    }
  }
}

Progress Coordinator::tick(int64_t in_flight) {
  Progress p;
  p.planned = sampler_->planned();
  store::ExperimentStatus status = store_.experiment(id_)->status;
  if (status == store::ExperimentStatus::running && !hold()) {
    // Another coordinator drives this experiment: report, change nothing.
    p.coordinator = store_.coordinator(id_).value_or("");
    p.counts = store_.trial_counts(id_);
    p.best = store_.best_trial(id_, sweep_->search.metric, sweep_->search.maximize());
    return p;
  }
  p.coordinating = status == store::ExperimentStatus::running;
  fail_dead_tasks();
  p.counts = store_.trial_counts(id_);

  // Adaptive samplers learn from trials that ended since the last tick.
  if (sweep_->search.method == "tpe") {
    store::TrialQuery recent;
    recent.sort_by = "finished_at";
    recent.descending = true;
    recent.limit = 200;
    for (const auto& t : store_.trials(id_, recent)) {
      if (!ended(t.status) || t.provisional || observed_.count(t.id)) continue;
      observed_.insert(t.id);
      if (auto v = store::metric(t.metrics, sweep_->search.metric)) sampler_->observe(t.index, *v);
    }
  }

  if (status == store::ExperimentStatus::running && !exhausted_) {
    // An adaptive sampler (TPE) keeps only `in_flight` trials out, so that
    // each new trial sees as many results as possible. Grid and random
    // trials do not depend on results: keep a deep backlog so that fast
    // trials never wait for the next tick, refilled in large batches.
    // search.max_concurrent caps both kinds: then only that many trials
    // exist unended at once (a grid or random sweep tops them up each tick).
    const bool adaptive = sweep_->search.method == "tpe";
    const int64_t max_concurrent = sweep_->search.max_concurrent;
    int64_t cap = in_flight;
    if (max_concurrent > 0)
      cap = adaptive ? std::min(cap, max_concurrent) : max_concurrent;
    else if (!adaptive)
      cap += kBacklog;
    int64_t room = cap - (p.counts.queued + p.counts.running);
    if (!adaptive && max_concurrent == 0 && room < kBacklog / 2) room = 0;  // big batches
    std::vector<sweep::TrialConfig> batch;
    while (room-- > 0) {
      auto c = sampler_->next();
      if (!c) {
        exhausted_ = true;
        break;
      }
      batch.push_back(std::move(*c));
    }
    if (!batch.empty()) {
      std::vector<store::NewTrial> rows;
      for (const auto& c : batch) rows.push_back({c.index, c.params.dump(), c.seed});
      // Trials and their tasks in one commit when the backends share a file
      // (otherwise the constructor republishes what a crash in between lost).
      try {
        queue_.write_together([&] {
          std::vector<int64_t> ids = store_.add_trials(id_, rows);
          std::vector<std::string> payloads;
          int64_t top = -1;
          for (size_t i = 0; i < ids.size(); ++i) {
            payloads.push_back(db::encode_task(
                {id_, ids[i], batch[i].index, 0, rows[i].config_json, rows[i].seed}));
            top = std::max(top, batch[i].index);
          }
          queue_.publish_batch(db::queue_name(id_), payloads);
          store_.set_published(id_, top);
        });
      } catch (const std::invalid_argument&) {
        // Those indexes exist: our lease ran out unnoticed (a stall longer
        // than kCoordinatorLease) and another coordinator took over. Hand
        // over; rebuild from the store if the lease comes back to us.
        holding_ = false;
        p.coordinating = false;
        p.coordinator = store_.coordinator(id_).value_or("");
        return p;
      }
      generated_ += static_cast<int64_t>(batch.size());
      p.counts.queued += static_cast<int64_t>(batch.size());
    }
  }

  // Ended trials per second since this coordinator started: steady, and
  // honest about slow trials.
  const int64_t ended_now = p.counts.total() - p.counts.queued - p.counts.running;
  if (rate_ended0_ < 0) rate_ended0_ = ended_now;
  const double dt =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - rate_t0_).count();
  rate_ = dt > 0.5 ? (ended_now - rate_ended0_) / dt : 0;
  p.trials_per_second = rate_;
  p.best = store_.best_trial(id_, sweep_->search.metric, sweep_->search.maximize());
  p.done = status != store::ExperimentStatus::running ||
           (exhausted_ && p.counts.queued + p.counts.running == 0);
  if (status == store::ExperimentStatus::running && p.done) {
    // Every trial failed: nothing was learned, and the experiment says so.
    const bool failed = p.counts.total() > 0 && p.counts.failed == p.counts.total();
    // The rule once more at the end: a trial unpinned meanwhile, a writer
    // that raced another, leave nothing beyond the best K and the pinned.
    WeightsRetention(store_, WeightsRule::of(*sweep_)).prune(id_);
    store_.set_status(id_,
                      failed ? store::ExperimentStatus::failed : store::ExperimentStatus::finished);
    store_.append_event(failed ? "experiment.failed" : "experiment.finished",
                        {{"experiment", id_}});
  }
  return p;
}

// A task the queue gave up on (max_attempts deliveries: workers that died or
// gave it back each time) would leave its trial queued or running for good,
// and the experiment would never finish. Its dead letter ends the trial as
// failed, with the queue's reasons. A trial that ended meanwhile (a slow
// worker finished it after all) is left as it is.
int64_t Coordinator::fail_dead_tasks() {
  const std::string dead = queue::dead_letter_queue(db::queue_name(id_));
  if (queue_.waiting(dead) == 0) return 0;  // a read, not a write lock, per tick
  int64_t failed = 0;
  while (auto letter = queue_.lease(dead, "coordinator", 60)) {
    db::TrialTask task;
    try {
      task = db::decode_task(letter->payload);
    } catch (const db::ProtocolError&) {
      queue_.ack(*letter);  // not ours to read; the queue keeps the original as dead
      continue;
    }
    auto t = store_.trial(task.trial_id);
    const std::string why =
        "the task queue gave up on this trial: " +
        (letter->error.empty() ? std::string("max attempts reached") : letter->error);
    if (t && !ended(t->status) &&
        store_.finish_trial(t->id, t->attempt, store::TrialStatus::failed, {}, why)) {
      store_.append_event("trial.dead", {{"experiment", id_}, {"trial", t->id}, {"error", why}});
      ++failed;
    }
    queue_.ack(*letter);
  }
  return failed;
}

void Coordinator::cancel() {
  queue_.cancel(db::queue_name(id_));
  store_.cancel_trials(id_);
  store_.set_status(id_, store::ExperimentStatus::cancelled);
  store_.append_event("experiment.cancelled", {{"experiment", id_}});
}

}  // namespace dnnlab::experiment
