#include "worker/worker_loop.hpp"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <iostream>
#include <map>
#include <memory>
#include <thread>

#include "experiment/coordinator.hpp"
#include "experiment/task.hpp"
#include "sweep/sampler.hpp"
#include "sweep/scheduler.hpp"
#include "worker/training_run.hpp"

namespace dnnlab::worker {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

double metric_value(const nn::EpochResult& r, const std::string& metric) {
  if (metric == "val_loss") return r.val_loss;
  if (metric == "train_loss") return r.train_loss;
  if (metric == "train_acc") return r.train_acc;
  return r.val_acc;
}

// What a worker keeps per experiment: the parsed sweep and its scheduler.
struct ExperimentCache {
  std::unique_ptr<sweep::SweepSpec> sweep;
  std::unique_ptr<sweep::Scheduler> scheduler;
};

class Worker {
 public:
  explicit Worker(const WorkerOptions& o)
      : o_(o), b_(experiment::open_backends(o.broker_url, o.store_url)) {
    if (o_.worker_id.empty()) {
      char host[256] = "host";
      gethostname(host, sizeof host - 1);
      o_.worker_id = std::string(host) + "-" + std::to_string(getpid());
    }
    store::WorkerRecord w;
    w.id = o_.worker_id;
    w.kind = store::WorkerKind::native;
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    w.host = host;
    w.pid = getpid();
    b_.store->upsert_worker(w);
    b_.store->append_event("worker.joined", {{"worker", o_.worker_id}, {"kind", "native"}});
  }
  ~Worker() {
    try {
      b_.store->mark_worker_gone(o_.worker_id);
      b_.store->append_event("worker.left", {{"worker", o_.worker_id}});
    } catch (...) {
    }
  }

  int64_t run() {
    auto idle_since = Clock::now();
    auto last_beat = Clock::now() - std::chrono::hours(1);
    auto last_list = last_beat;
    std::vector<int64_t> running;
    int64_t ended = 0;
    while (!stopping()) {
      if (seconds_since(last_list) > 1.0) {
        running.clear();
        for (const auto& e : b_.store->experiments())
          if (e.status == store::ExperimentStatus::running &&
              (!o_.experiment || e.id == o_.experiment))
            running.push_back(e.id);
        last_list = Clock::now();
        if (o_.experiment && running.empty()) break;
      }
      bool worked = false;
      for (int64_t exp : running) {
        auto lease = b_.queue->lease(experiment::queue_name(exp), o_.worker_id, o_.lease_seconds);
        if (!lease) continue;
        ended += run_task(*lease);
        worked = true;
        idle_since = Clock::now();
        break;
      }
      if (seconds_since(last_beat) > 2.0) {
        b_.store->heartbeat(o_.worker_id, std::nullopt);
        last_beat = Clock::now();
      }
      if (!worked) {
        if (o_.idle_exit_seconds > 0 && seconds_since(idle_since) > o_.idle_exit_seconds) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(running.empty() ? 200 : 20));
      }
    }
    return ended;
  }

 private:
  bool stopping() const { return o_.stop && *o_.stop; }

  ExperimentCache& experiment_cache(int64_t id) {
    auto it = cache_.find(id);
    if (it != cache_.end()) return it->second;
    auto e = b_.store->experiment(id);
    if (!e) throw std::invalid_argument("experiment " + std::to_string(id) + " does not exist");
    ExperimentCache c;
    c.sweep = std::make_unique<sweep::SweepSpec>(sweep::parse_sweep(e->spec_text, e->spec_path));
    c.scheduler = sweep::make_scheduler(*c.sweep);
    return cache_.emplace(id, std::move(c)).first->second;
  }

  const data::Dataset& dataset(const nn::DataSpec& spec) {
    const std::string key = spec.dataset + "|" + std::to_string(spec.validation) + "|" +
                            spec.normalize + "|" + std::to_string(spec.limit_train);
    auto it = data_.find(key);
    if (it == data_.end()) {
      if (data_.size() >= 2) data_.clear();  // bound memory: a worker rarely needs more
      it = data_.emplace(key, data::load(load_options(spec, o_.data_dir))).first;
    }
    return it->second;
  }

  // Streams epochs to the store, asks the scheduler, keeps the lease alive.
  class TrialObserver : public nn::TrainObserver {
   public:
    TrialObserver(Worker& w, queue::TaskLease& lease, int attempt, ExperimentCache& exp,
                  const store::TrialRecord& t)
        : w_(w),
          lease_(lease),
          attempt_(attempt),
          exp_(exp),
          trial_(t),
          last_extend_(Clock::now()) {}
    void on_batch(int, int64_t, int64_t, double, double, double) override {
      if (seconds_since(last_extend_) > w_.o_.lease_seconds / 3) {
        if (!w_.b_.queue->extend(lease_, w_.o_.lease_seconds)) lost_ = true;
        w_.b_.store->heartbeat(w_.o_.worker_id, trial_.id);
        last_extend_ = Clock::now();
      }
    }
    bool interrupted() const override { return lost_ || w_.stopping(); }
    bool on_epoch(const nn::EpochResult& r) override {
      store::EpochMetrics m;
      m.epoch = r.epoch;
      m.train_loss = r.train_loss;
      m.train_acc = r.train_acc;
      m.val_loss = r.val_loss;
      m.val_acc = r.val_acc;
      m.seconds = r.seconds;
      m.lr = r.lr;
      if (!w_.b_.store->record_epoch(trial_.id, attempt_, m)) {
        lost_ = true;  // a newer attempt owns the trial
        return false;
      }
      const std::string& metric = exp_.sweep->search.metric;
      // Other workers' results reach this scheduler through the store.
      if (exp_.sweep->scheduler.type != "fifo")
        for (const auto& te : w_.b_.store->epochs_for(trial_.experiment_id, r.epoch))
          if (te.trial_id != trial_.id)
            if (auto v = store::metric(te.metrics, metric))
              exp_.scheduler->replay(te.trial_index, r.epoch, *v);
      if (exp_.scheduler->on_epoch(trial_.index, r.epoch, metric_value(r, metric)) ==
          sweep::Decision::kStop) {
        pruned_ = true;
        return false;
      }
      return true;
    }
    bool lost() const { return lost_; }
    bool pruned() const { return pruned_; }

   private:
    Worker& w_;
    queue::TaskLease& lease_;
    int attempt_;
    ExperimentCache& exp_;
    const store::TrialRecord& trial_;
    Clock::time_point last_extend_;
    bool lost_ = false, pruned_ = false;
  };

  // Returns 1 when it ended the trial (finished, pruned or failed).
  int64_t run_task(queue::TaskLease& lease) {
    experiment::TrialTask task;
    try {
      task = experiment::decode_task(lease.payload);
    } catch (const experiment::ProtocolError& e) {
      b_.queue->nack(lease, false, e.what());
      return 0;
    }
    // The store's attempt: newer than any earlier run of a reopened trial.
    const int attempt = task.attempt(lease.attempt);
    auto trial = b_.store->trial(task.trial_id);
    if (!trial || trial->status != store::TrialStatus::queued &&
                      trial->status != store::TrialStatus::running) {
      b_.queue->ack(lease);  // already ended (a duplicate delivery) or gone
      return 0;
    }
    ExperimentCache& exp = experiment_cache(task.experiment_id);
    auto fail = [&](const std::string& why) {
      store::TrialMetrics none;
      const bool counted =
          b_.store->finish_trial(trial->id, attempt, store::TrialStatus::failed, none, why);
      b_.queue->ack(lease);
      return counted ? 1 : 0;
    };
    nn::RunSpec run;
    const data::Dataset* data = nullptr;
    try {
      run = exp.sweep->materialize(
          {trial->index, nlohmann::json::parse(trial->config_json), trial->seed});
      data = &dataset(run.data);
    } catch (const std::exception& e) {
      if (!b_.store->mark_running(trial->id, attempt, o_.worker_id)) return b_.queue->ack(lease), 0;
      return fail(e.what());
    }
    if (!b_.store->mark_running(trial->id, attempt, o_.worker_id, provenance(*data))) {
      b_.queue->ack(lease);  // a newer attempt owns it
      return 0;
    }
    // mark_running also set this worker's current trial and logged trial.started.
    if (o_.verbose)
      std::cerr << o_.worker_id << ": trial " << trial->index << " attempt " << attempt << "\n";

    TrialObserver obs(*this, lease, attempt, exp, *trial);
    RunResult r;
    try {
      r = train_run(run, *data, &obs);
    } catch (const std::exception& e) {
      return fail(e.what());
    }
    if (obs.lost()) return 0;  // someone else has the trial now
    if (stopping()) {
      // Ctrl-C: give the trial back; its next attempt starts afresh.
      b_.store->release_trial(trial->id, attempt);
      b_.queue->nack(lease, true, "worker stopped");
      return 0;
    }
    exp.scheduler->on_finish(trial->index);
    store::TrialMetrics m;
    if (!r.curve.empty()) {
      const auto& last = r.curve.back();
      m.train_loss = last.train_loss;
      m.train_acc = last.train_acc;
      m.val_loss = last.val_loss;
      m.val_acc = last.val_acc;
    }
    m.test_acc = r.test_acc;
    m.epochs_done = static_cast<int64_t>(r.curve.size());
    m.seconds = r.train_seconds;
    const auto status = obs.pruned() ? store::TrialStatus::pruned : store::TrialStatus::finished;
    const bool counted = b_.store->finish_trial(trial->id, attempt, status, m);
    b_.queue->ack(lease);
    return counted ? 1 : 0;
  }

  WorkerOptions o_;
  experiment::Backends b_;
  std::map<int64_t, ExperimentCache> cache_;
  std::map<std::string, data::Dataset> data_;
};

}  // namespace

int64_t run_worker(const WorkerOptions& options) {
  Worker w(options);
  return w.run();
}

}  // namespace dnnlab::worker
