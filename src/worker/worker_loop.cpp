#include "worker/worker_loop.hpp"

#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cmath>
#include <deque>
#include <iostream>
#include <map>
#include <memory>
#include <thread>

#include "db/task_codec.hpp"
#include "experiment/backends.hpp"
#include "experiment/catalogue.hpp"
#include "experiment/lease_service.hpp"
#include "experiment/training_run.hpp"
#include "worker/lease_keeper.hpp"

namespace dnnlab::worker {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// What a worker learns per experiment: how long its trials took here, and
// the queue prefetch asked for them.
class Pacer {
 public:
  explicit Pacer(queue::TaskQueue& q) : q_(q) {}

  // Trials of an experiment this worker leases at once: one, unless they
  // take a few milliseconds; then enough for about 50 ms of work per commit.
  int batch_size(int64_t exp) { return batch_size(pace_[exp]); }

  // Asks the queue to push two batches ahead (the one leased next and the
  // one after, so the next lease finds its tasks here), a power of two: 2
  // for trials of 50 ms or more, up to 32 for trials of a few ms. Raised at
  // once; lowered (the queue then gives back what it holds beyond) only
  // when trials became 4x longer, so a noisy average does not flap.
  void want_prefetch(int64_t exp) {
    Pace& p = pace_[exp];
    const int want = 2 * static_cast<int>(std::bit_ceil(static_cast<unsigned>(batch_size(p))));
    if (want > p.queue_prefetch || want * 4 <= p.queue_prefetch) {
      q_.want_prefetch(db::queue_name(exp), want);
      p.queue_prefetch = want;
    }
  }

  void trained(int64_t exp, double seconds) {
    Pace& p = pace_[exp];
    p.trial_seconds = 0.5 * p.trial_seconds + 0.5 * seconds;
  }

 private:
  struct Pace {
    double trial_seconds = 1.0;  // recent trials' training time (a moving average)
    int queue_prefetch = 0;      // the last want_prefetch() (0: none yet)
  };
  static int batch_size(const Pace& p) {
    return static_cast<int>(std::clamp(0.05 / std::max(p.trial_seconds, 1e-6), 1.0, 16.0));
  }

  queue::TaskQueue& q_;
  std::map<int64_t, Pace> pace_;
};

// Streams epochs through the lease service, which buffers them and asks
// the scheduler, and stops training at the first batch after the lease
// was lost (the LeaseKeeper keeps it alive meanwhile).
class TrialObserver : public nn::TrainObserver {
 public:
  TrialObserver(experiment::LeaseService& svc, const LeaseKeeper& keeper,
                const std::atomic<bool>* stop, experiment::TrialLease& l)
      : svc_(svc), keeper_(keeper), stop_(stop), l_(l) {}
  // Every batch: interrupted() is cheap, and a lost lease stops at once.
  int64_t batch_interval() const override { return 1; }
  bool interrupted() const override {
    if (!lost_ && keeper_.lost(l_.task)) lost_ = true;
    if (!lost_ && keep_alive_due() && !svc_.keep_alive(l_)) lost_ = true;
    if (!svc_.flush_epochs_if_due(l_)) lost_ = true;
    return lost_ || (stop_ && stop_->load(std::memory_order_relaxed));
  }
  bool on_epoch(const nn::EpochResult& r) override {
    store::EpochMetrics m;
    m.epoch = r.epoch;
    m.train_loss = r.train_loss;
    m.train_acc = r.train_acc;
    m.val_loss = r.val_loss;
    m.val_acc = r.val_acc;
    m.seconds = r.seconds;
    m.lr = r.lr;
    const experiment::LeaseService::Verdict v = svc_.report_epoch(l_, m, true);
    if (v.lost) lost_ = true;
    if (lost_) return false;  // a newer attempt owns the trial
    if (!v.go) pruned_ = true;
    return v.go;
  }
  bool lost() const { return lost_ || keeper_.lost(l_.task); }
  bool pruned() const { return pruned_; }

 private:
  // The broker hears from the holder's connection only through calls on
  // it (the keeper extends on a connection of its own): every 250 ms while
  // a trial trains, well inside half of the shortest useful heartbeat (1 s).
  bool keep_alive_due() const {
    if (seconds_since(alive_since_) < 0.25) return false;
    alive_since_ = Clock::now();
    return true;
  }

  experiment::LeaseService& svc_;
  const LeaseKeeper& keeper_;
  const std::atomic<bool>* stop_;
  experiment::TrialLease& l_;
  mutable Clock::time_point alive_since_ = Clock::now();
  mutable bool lost_ = false;
  bool pruned_ = false;
};

// The trial's row at its end: the last epoch's figures and the test accuracy.
store::TrialMetrics trial_metrics(const experiment::RunResult& r, bool has_test) {
  store::TrialMetrics m;
  if (!r.curve.empty()) {
    const auto& last = r.curve.back();
    m.train_loss = last.train_loss;
    m.train_acc = last.train_acc;
    m.val_loss = last.val_loss;
    m.val_acc = last.val_acc;
  }
  if (has_test) m.test_acc = r.test_acc;
  m.epochs_done = static_cast<int64_t>(r.curve.size());
  m.seconds = r.train_seconds;
  return m;
}

// The native adapter of the lease service (experiment/lease_service.hpp):
// it decides when to lease (batches of short trials, prefetch) and trains
// here; the service owns what leases, epochs, ends and give-backs do.
class Worker {
 public:
  explicit Worker(const WorkerOptions& o)
      : o_(o),
        b_(experiment::open_backends(o.broker_url, o.store_url)),
        catalogue_(*b_.store),
        svc_(*b_.store, *b_.queue, catalogue_,
             {true, [this](const queue::TaskLease& l) { keeper_->drop(l); }}),
        data_(o.data_dir) {
    char host[256] = "host";
    gethostname(host, sizeof host - 1);
    if (o_.worker_id.empty()) o_.worker_id = std::string(host) + "-" + std::to_string(getpid());
    store::WorkerRecord w;
    w.id = o_.worker_id;
    w.kind = store::WorkerKind::native;
    w.host = host;
    w.pid = getpid();
    b_.store->upsert_worker(w);
    b_.store->append_event("worker.joined", {{"worker", o_.worker_id}, {"kind", "native"}});
    keeper_ =
        std::make_unique<LeaseKeeper>(o_.broker_url, o_.store_url, o_.worker_id, o_.lease_seconds);
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
    std::vector<int64_t> running;
    bool idle = true;
    while (!stopping()) {
      // Idle with one experiment: look often, to leave soon after it ends.
      if (ready_.empty()) {
        running = list_running(idle && o_.experiment ? 0.02 : 1.0);
        if (o_.experiment && running.empty()) break;
      }
      if (ready_.empty()) {
        // The ended trials' results and the next leases (marked running):
        // one commit when queue and store share a file.
        b_.queue->write_together([&] {
          commit();
          for (int64_t exp : running)
            if (lease_into_ready(exp)) break;
        });
      }
      idle = ready_.empty();
      if (!idle) {
        Next n = std::move(ready_.front());
        ready_.pop_front();
        if (n.kind == Next::kStarted || load_and_start(n)) train(n);
        idle_since = Clock::now();
      }
      if (seconds_since(last_beat) > 2.0) {
        b_.store->heartbeat(o_.worker_id, std::nullopt);
        last_beat = Clock::now();
      }
      if (idle) {
        if (o_.idle_exit_seconds > 0 && seconds_since(idle_since) > o_.idle_exit_seconds) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(running.empty() ? 200 : 20));
      }
    }
    b_.queue->write_together([&] {
      commit();
      for (Next& n : ready_) svc_.give_back(n.l);  // leased, not trained: back to the queue
      ready_.clear();
    });
    return ended_;
  }

 private:
  bool stopping() const { return o_.stop && o_.stop->load(std::memory_order_relaxed); }

  std::vector<int64_t> list_running(double max_age) {
    if (!o_.experiment) return catalogue_.running(max_age);
    if (seconds_since(listed_at_) <= max_age) return listed_;
    listed_.clear();
    auto e = b_.store->experiment(o_.experiment);
    if (e && e->status == store::ExperimentStatus::running) listed_.push_back(e->id);
    listed_at_ = Clock::now();
    return listed_;
  }

  void commit() {
    for (bool counted : svc_.commit()) ended_ += counted;
  }

  // What lease_next() found.
  struct Next {
    // kToStart: ready to run, mark_running not yet sent (start_ready).
    enum Kind { kNone, kDone, kNeedsData, kToStart, kStarted } kind = kNone;
    experiment::TrialLease l;
    const experiment::LoadedData* data = nullptr;
  };

  // Leases up to batch_size() trials of `exp` into ready_ (stopping after
  // one whose data set must be loaded first), starts them in one batch;
  // true when ready_ has any.
  bool lease_into_ready(int64_t exp) {
    pacer_.want_prefetch(exp);
    while (static_cast<int>(ready_.size()) < pacer_.batch_size(exp)) {
      Next n;
      try {
        n = lease_next(exp);
      } catch (const std::invalid_argument&) {
        break;  // deleted since the list was read
      }
      if (n.kind == Next::kNone) break;
      if (n.kind == Next::kDone) continue;
      const bool needs_data = n.kind == Next::kNeedsData;
      ready_.push_back(std::move(n));
      if (needs_data) break;
    }
    start_ready();
    return !ready_.empty();
  }

  // Leases a task of `exp` (the service decodes it and resolves its spec):
  // kToStart when its data set is loaded already, kNeedsData when it must
  // be loaded first (outside the write transaction).
  Next lease_next(int64_t exp) {
    Next n;
    switch (svc_.lease(exp, o_.worker_id, o_.lease_seconds, n.l)) {
      case experiment::LeaseService::Got::kNone:
        return n;
      case experiment::LeaseService::Got::kSkipped:
        n.kind = Next::kDone;
        return n;
      case experiment::LeaseService::Got::kLeased:
        break;
    }
    keeper_->keep(n.l.task);  // also while its data set loads
    n.data = data_.find(n.l.run.data);
    n.kind = n.data ? Next::kToStart : Next::kNeedsData;
    return n;
  }

  // Starts every kToStart trial of ready_ in one store batch (one commit);
  // a refused start (a duplicate delivery, a newer attempt owns it) was
  // acked by the service and is dropped.
  void start_ready() {
    std::vector<experiment::TrialLease*> leases;
    std::vector<const nlohmann::json*> provenance;
    for (Next& n : ready_)
      if (n.kind == Next::kToStart) {
        leases.push_back(&n.l);
        provenance.push_back(&n.data->provenance);
      }
    if (leases.empty()) return;
    svc_.start_all(leases, provenance);
    for (auto it = ready_.begin(); it != ready_.end();) {
      if (it->kind == Next::kToStart && !it->l.started) {
        it = ready_.erase(it);
        continue;
      }
      if (it->kind == Next::kToStart) {
        it->kind = Next::kStarted;
        say_started(it->l);
      }
      ++it;
    }
  }

  void say_started(const experiment::TrialLease& l) const {
    if (o_.verbose)
      std::cerr << o_.worker_id << ": trial " << l.trial.index << " attempt " << l.attempt << "\n";
  }

  bool load_and_start(Next& n) {
    std::string error;
    try {
      n.data = &data_.get(n.l.run.data);
    } catch (const std::exception& e) {
      error = e.what();
    }
    bool started = false;
    b_.queue->write_together([&] {
      if (!n.data) {
        svc_.fail(std::move(n.l), error);
      } else if ((started = svc_.start(n.l, n.data->provenance))) {
        say_started(n.l);
      }
    });
    return started;
  }

  // Trains a started trial; its end is written with the next leases.
  void train(Next& n) {
    TrialObserver obs(svc_, *keeper_, o_.stop, n.l);
    experiment::RunResult r;
    std::optional<nn::Model> model;  // kept for its weights
    const auto t0 = Clock::now();
    keeper_->set_current_trial(n.l.trial.id);
    try {
      r = experiment::train_run(n.l.run, n.data->data, &obs, nullptr, &model,
                                experiment::TestWhenStopped::skip);
      pacer_.trained(n.l.trial.experiment_id, seconds_since(t0));
      keeper_->set_current_trial(std::nullopt);
    } catch (const std::exception& e) {
      keeper_->set_current_trial(std::nullopt);
      svc_.finish(std::move(n.l), store::TrialStatus::failed, {}, e.what());
      return;
    }
    if (obs.lost()) {  // someone else has the trial now
      svc_.lost(n.l);
      return;
    }
    if (stopping()) {  // Ctrl-C: give the trial back; its next attempt starts afresh
      svc_.give_back(n.l);
      return;
    }
    const store::TrialMetrics m = trial_metrics(r, r.tested);
    // Serialised only for a trial the retention rule could keep now.
    std::string weights;
    if (!obs.pruned() && model && svc_.wants_weights(n.l, m))
      weights = experiment::weights_file(
          n.l.run, *model,
          {{"trial_id", std::to_string(n.l.trial.id)}, {"params", n.l.trial.config_json}});
    svc_.finish(std::move(n.l),
                obs.pruned() ? store::TrialStatus::pruned : store::TrialStatus::finished, m, {},
                false, std::move(weights));
  }

  WorkerOptions o_;
  experiment::Backends b_;
  experiment::Catalogue catalogue_;
  experiment::LeaseService svc_;
  experiment::DataCache data_;
  std::unique_ptr<LeaseKeeper> keeper_;  // the heartbeat thread
  Pacer pacer_{*b_.queue};
  std::vector<int64_t> listed_;  // the one experiment, when running (list_running)
  Clock::time_point listed_at_ = Clock::now() - std::chrono::hours(1);
  std::deque<Next> ready_;  // leased trials not trained yet (a prefetch)
  int64_t ended_ = 0;
};

}  // namespace

int64_t run_worker(const WorkerOptions& options) {
  // Keep freed memory for the next trial: by default glibc gives a short
  // trial's buffers (the 200 KB batch of a 784-input model, say) back to the
  // kernel at every free and faults them in again for the next trial, which
  // cost a third of a trivial trial's time. Large blocks (data sets) are
  // still mapped and unmapped on their own.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  Worker w(options);
  return w.run();
}

}  // namespace dnnlab::worker
