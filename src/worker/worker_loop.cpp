#include "worker/worker_loop.hpp"

#include <malloc.h>
#include <unistd.h>

#include <algorithm>
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
#include "sweep/sampler.hpp"
#include "experiment/scheduler_feed.hpp"
#include "worker/lease_keeper.hpp"
#include "worker/training_run.hpp"

namespace dnnlab::worker {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// What a worker keeps per experiment: the parsed sweep and its scheduler,
// how long its trials took here, and the queue prefetch asked for them.
struct ExperimentCache {
  std::unique_ptr<sweep::SweepSpec> sweep;
  std::unique_ptr<experiment::SchedulerFeed> scheduler;
  double trial_seconds = 1.0;  // recent trials' training time (a moving average)
  int queue_prefetch = 0;      // the last want_prefetch() (0: none yet)
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
    auto last_list = last_beat;
    std::vector<int64_t> running;
    bool idle = true;
    while (!stopping()) {
      // Idle with one experiment: look often, to leave soon after it ends.
      if (ready_.empty() && seconds_since(last_list) > (idle && o_.experiment ? 0.02 : 1.0)) {
        running.clear();
        if (o_.experiment) {
          auto e = b_.store->experiment(o_.experiment);
          if (e && e->status == store::ExperimentStatus::running) running.push_back(e->id);
        } else {
          for (const auto& e : b_.store->experiments())
            if (e.status == store::ExperimentStatus::running) running.push_back(e.id);
        }
        last_list = Clock::now();
        if (o_.experiment && running.empty()) break;
      }
      if (ready_.empty()) {
        // The ended trials' results and the next leases (marked running):
        // one commit when queue and store share a file.
        b_.queue->write_together([&] {
          write_pending_ends();
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
      write_pending_ends();
      give_back_ready();
    });
    return ended_;
  }

 private:
  bool stopping() const { return o_.stop && o_.stop->load(std::memory_order_relaxed); }

  ExperimentCache& experiment_cache(int64_t id) {
    auto it = cache_.find(id);
    if (it != cache_.end()) return it->second;
    auto e = b_.store->experiment(id);
    if (!e) throw std::invalid_argument("experiment " + std::to_string(id) + " does not exist");
    ExperimentCache c;
    c.sweep = std::make_unique<sweep::SweepSpec>(sweep::parse_sweep(e->spec_text, e->spec_path));
    c.scheduler = std::make_unique<experiment::SchedulerFeed>(*c.sweep, id);
    return cache_.emplace(id, std::move(c)).first->second;
  }

  // A loaded data set and the provenance trials trained on it record.
  struct LoadedData {
    data::Dataset data;
    nlohmann::json provenance;
  };

  static std::string data_key(const nn::DataSpec& spec) { return spec.key(); }
  const LoadedData* cached_dataset(const nn::DataSpec& spec) const {
    auto it = data_.find(data_key(spec));
    return it == data_.end() ? nullptr : &it->second;
  }
  const LoadedData& dataset(const nn::DataSpec& spec) {
    if (const LoadedData* d = cached_dataset(spec)) return *d;
    if (data_.size() >= 2) data_.clear();  // bound memory: a worker rarely needs more
    LoadedData d{data::load(load_options(spec, o_.data_dir)), {}};
    d.provenance = provenance(d.data);
    return data_.emplace(data_key(spec), std::move(d)).first->second;
  }

  // Streams epochs to the store (in batches: flush_epochs), asks the
  // scheduler, and stops training at the first batch after the lease was
  // lost (the LeaseKeeper keeps it alive meanwhile). The last epoch is held
  // back and written with the trial's end.
  class TrialObserver : public nn::TrainObserver {
   public:
    TrialObserver(Worker& w, queue::TaskLease& lease, int attempt, ExperimentCache& exp,
                  const store::TrialRecord& t, int epochs)
        : w_(w), lease_(lease), attempt_(attempt), exp_(exp), trial_(t), epochs_(epochs) {}
    // Every batch: interrupted() is cheap, and a lost lease stops at once.
    int64_t batch_interval() const override { return 1; }
    bool interrupted() const override {
      if (!lost_ && w_.keeper_->lost(lease_)) lost_ = true;
      if (!lost_ && w_.keep_alive_due() && !w_.b_.queue->keep_alive(lease_)) lost_ = true;
      if (w_.epochs_due()) flush();
      return lost_ || w_.stopping();
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
      if (r.epoch >= epochs_) {
        last_epoch_ = m;
      } else {
        w_.epochs_.push_back({trial_.id, attempt_, m});
        // A scheduler that compares trials reads the others' epochs from
        // the store: theirs must be there as soon as ours is.
        if (exp_.sweep->scheduler.type != "fifo" || w_.epochs_due()) flush();
        if (lost_) return false;  // a newer attempt owns the trial
      }
      if (!exp_.scheduler->verdict(*w_.b_.store, {trial_.id, trial_.index, r.epoch, epochs_}, m,
                                   true)) {
        pruned_ = true;
        return false;
      }
      return true;
    }
    bool lost() const { return lost_ || w_.keeper_->lost(lease_); }
    // Writes the worker's buffered epochs; one of ours refused means a
    // newer attempt owns the trial.
    void flush() const {
      if (!w_.flush_epochs(trial_.id, attempt_)) lost_ = true;
    }
    bool pruned() const { return pruned_; }
    const std::optional<store::EpochMetrics>& last_epoch() const { return last_epoch_; }

   private:
    Worker& w_;
    queue::TaskLease& lease_;
    int attempt_;
    ExperimentCache& exp_;
    const store::TrialRecord& trial_;
    int epochs_;
    mutable bool lost_ = false;
    bool pruned_ = false;
    std::optional<store::EpochMetrics> last_epoch_;
  };

  // A trial's end, written together with the next lease.
  struct PendingEnd {
    queue::TaskLease lease;
    int64_t trial_id = 0;
    int attempt = 0;
    store::TrialStatus status = store::TrialStatus::finished;
    store::TrialMetrics metrics;
    std::optional<store::EpochMetrics> last_epoch;
    std::string error;
  };

  // Epochs wait in epochs_ at most this long, or until there are this
  // many: the dashboard still sees a trial's progress within a second, and
  // a worker training many short epochs writes them a few hundred at a time.
  static constexpr double kFlushSeconds = 0.5;
  static constexpr std::size_t kFlushRows = 256;

  // The broker hears from the holder's connection only through calls on
  // it (the keeper extends on a connection of its own): every 250 ms while
  // a trial trains, well inside half of the shortest useful heartbeat (1 s).
  bool keep_alive_due() {
    if (seconds_since(alive_since_) < 0.25) return false;
    alive_since_ = Clock::now();
    return true;
  }

  bool epochs_due() const {
    return !epochs_.empty() &&
           (epochs_.size() >= kFlushRows || seconds_since(epochs_since_) >= kFlushSeconds);
  }

  // Writes the buffered epochs in one batch. False when one of trial
  // `trial_id`'s at `attempt` was refused (a newer attempt owns it). A
  // store that cannot be reached throws; the epochs stay buffered.
  bool flush_epochs(int64_t trial_id, int attempt) {
    if (epochs_.empty()) return true;
    store::ResultBatch batch;
    batch.epochs = epochs_;
    const store::BatchOutcome out = b_.store->record_results(batch);
    epochs_.clear();
    epochs_since_ = Clock::now();
    for (std::size_t i = 0; i < out.epochs.size(); ++i)
      if (!out.epochs[i] && batch.epochs[i].trial_id == trial_id &&
          batch.epochs[i].attempt == attempt)
        return false;
    return true;
  }

  // Writes the buffered epochs and the pending ends (last epoch, finish) in
  // one batch, then acks their tasks all at once (one ack batch is one
  // broker commit), counting the trials that count. A task is acked only
  // once its result is stored: when the store throws (unreachable past its
  // reconnect time), everything stays pending and unacked, and the broker
  // redelivers it if this worker never comes back; a worker that dies
  // between the store and the ack leaves tasks whose trials ended, and their
  // redelivery is acked as a duplicate (lease_next).
  void write_pending_ends() {
    if (pending_.empty() && epochs_.empty()) return;
    store::ResultBatch batch;
    batch.epochs = epochs_;
    for (const PendingEnd& p : pending_) {
      if (p.last_epoch) batch.epochs.push_back({p.trial_id, p.attempt, *p.last_epoch});
      batch.ends.push_back({p.trial_id, p.attempt, p.status, p.metrics, p.error});
    }
    const store::BatchOutcome out = b_.store->record_results(batch);
    epochs_.clear();
    epochs_since_ = Clock::now();
    std::vector<PendingEnd> ends;
    ends.swap(pending_);
    std::vector<queue::TaskLease> leases;
    leases.reserve(ends.size());
    for (std::size_t i = 0; i < ends.size(); ++i) {
      if (out.ends[i]) ++ended_;
      keeper_->drop(ends[i].lease);
      leases.push_back(std::move(ends[i].lease));
    }
    if (!leases.empty()) b_.queue->ack_batch(leases);
  }

  // Trials of an experiment this worker leases at once: one, unless they
  // take a few milliseconds; then enough for about 50 ms of work per commit.
  static int batch_size(const ExperimentCache& e) {
    return static_cast<int>(std::clamp(0.05 / std::max(e.trial_seconds, 1e-6), 1.0, 16.0));
  }

  // Asks the queue to push two batches ahead (the one leased next and the
  // one after, so the next lease finds its tasks here), a power of two: 2
  // for trials of 50 ms or more, up to 32 for trials of a few ms. Raised at
  // once; lowered (the queue then gives back what it holds beyond) only
  // when trials became 4x longer, so a noisy average does not flap.
  void want_prefetch(int64_t exp, ExperimentCache& e) {
    const int want = 2 * static_cast<int>(std::bit_ceil(static_cast<unsigned>(batch_size(e))));
    if (want > e.queue_prefetch || want * 4 <= e.queue_prefetch) {
      b_.queue->want_prefetch(db::queue_name(exp), want);
      e.queue_prefetch = want;
    }
  }

  // Leases up to batch_size() trials of `exp` into ready_ (stopping after
  // one whose data set must be loaded first), starts them in one batch;
  // true when ready_ has any.
  bool lease_into_ready(int64_t exp) {
    ExperimentCache* e = nullptr;
    try {
      e = &experiment_cache(exp);
    } catch (const std::invalid_argument&) {
      return !ready_.empty();  // deleted since the list was read
    }
    want_prefetch(exp, *e);
    while (static_cast<int>(ready_.size()) < batch_size(*e)) {
      Next n = lease_next(exp);
      if (n.kind == Next::kNone) break;
      if (n.kind == Next::kDone) continue;
      const bool needs_data = n.kind == Next::kNeedsData;
      ready_.push_back(std::move(n));
      if (needs_data) break;
    }
    start_ready();
    return !ready_.empty();
  }

  // mark_running for every leased trial of ready_ in one record_results (one
  // commit, where a PostgreSQL store would otherwise commit once per trial);
  // a refused start (a duplicate delivery, a newer attempt owns it) is acked
  // and dropped. When the batch throws because a trial is gone, they start
  // one by one (start() acks that one). A store that cannot be reached
  // throws, as mark_running would; those still kToStart start in run().
  void start_ready() {
    store::ResultBatch batch;
    for (const Next& n : ready_)
      if (n.kind == Next::kToStart)
        batch.starts.push_back({n.trial.id, n.attempt, o_.worker_id, n.data->provenance});
    if (batch.starts.empty()) return;
    std::vector<bool> started;
    bool one_by_one = false;  // start() printed and acked already
    try {
      started = b_.store->record_results(batch).starts;
    } catch (const std::invalid_argument&) {
      one_by_one = true;
      for (Next& n : ready_)
        if (n.kind == Next::kToStart) started.push_back(start(n));
    }
    std::size_t i = 0;
    for (auto it = ready_.begin(); it != ready_.end();) {
      if (it->kind != Next::kToStart) {
        ++it;
        continue;
      }
      if (started[i++]) {
        it->kind = Next::kStarted;
        if (o_.verbose && !one_by_one)
          std::cerr << o_.worker_id << ": trial " << it->trial.index << " attempt " << it->attempt
                    << "\n";
        ++it;
      } else {
        if (!one_by_one) ack(it->lease);
        it = ready_.erase(it);
      }
    }
  }

  // Stopping: leased trials not yet trained go back to the queue.
  void give_back_ready() {
    for (Next& n : ready_) {
      if (n.kind == Next::kStarted) b_.store->release_trial(n.trial.id, n.attempt);
      nack(n.lease, true, "worker stopped");
    }
    ready_.clear();
  }

  // A task's end: the keeper lets go of its lease first (a done task can no
  // longer be extended, which the keeper would take for a lost lease).
  bool ack(const queue::TaskLease& lease) {
    keeper_->drop(lease);
    return b_.queue->ack(lease);
  }
  bool nack(const queue::TaskLease& lease, bool requeue, const std::string& why) {
    keeper_->drop(lease);
    return b_.queue->nack(lease, requeue, why);
  }

  // What lease_next() found.
  struct Next {
    // kToStart: ready to run, mark_running not yet sent (start_ready).
    enum Kind { kNone, kDone, kNeedsData, kToStart, kStarted } kind = kNone;
    queue::TaskLease lease;
    int attempt = 0;
    store::TrialRecord trial;
    ExperimentCache* exp = nullptr;
    nn::RunSpec run;
    const LoadedData* data = nullptr;
  };

  // mark_running; a trial that no longer exists (its experiment deleted) is
  // not to be run either.
  bool mark_running(const Next& n, const nlohmann::json& provenance) {
    try {
      return b_.store->mark_running(n.trial.id, n.attempt, o_.worker_id, provenance);
    } catch (const std::invalid_argument&) {
      return false;
    }
  }

  // Fails a trial that cannot run: it ends now, counted once.
  void fail(Next& n, const std::string& why) {
    if (!mark_running(n, nlohmann::json::object())) {
      ack(n.lease);  // a newer attempt owns it
      return;
    }
    pending_.push_back(
        PendingEnd{n.lease, n.trial.id, n.attempt, store::TrialStatus::failed, {}, {}, why});
  }

  // Leases a task of `exp` and prepares it: kToStart when its data set is
  // loaded already. kDone: the task needed no training (a
  // duplicate delivery, an unreadable payload, a trial that cannot run).
  Next lease_next(int64_t exp) {
    Next n;
    auto lease = b_.queue->lease(db::queue_name(exp), o_.worker_id, o_.lease_seconds);
    if (!lease) return n;
    n.lease = std::move(*lease);
    keeper_->keep(n.lease);  // also while its data set loads
    n.kind = Next::kDone;
    db::TrialTask task;
    try {
      task = db::decode_task(n.lease.payload);
    } catch (const db::ProtocolError& e) {
      nack(n.lease, false, e.what());
      return n;
    }
    // The store's attempt: newer than any earlier run of a reopened trial.
    n.attempt = task.attempt(n.lease.attempt);
    if (!task.config_json.empty()) {
      // The task carries the trial's values: no store read. Whether the
      // trial still waits for this attempt is mark_running's answer (start).
      n.trial.id = task.trial_id;
      n.trial.experiment_id = task.experiment_id;
      n.trial.index = task.index;
      n.trial.config_json = std::move(task.config_json);
      n.trial.seed = task.seed;
    } else {
      auto trial = b_.store->trial(task.trial_id);
      if (!trial || (trial->status != store::TrialStatus::queued &&
                     trial->status != store::TrialStatus::running)) {
        ack(n.lease);  // already ended (a duplicate delivery) or gone
        return n;
      }
      n.trial = std::move(*trial);
    }
    n.exp = &experiment_cache(task.experiment_id);
    try {
      n.run = n.exp->sweep->materialize(
          {n.trial.index, nlohmann::json::parse(n.trial.config_json), n.trial.seed});
    } catch (const std::exception& e) {
      fail(n, e.what());
      return n;
    }
    n.data = cached_dataset(n.run.data);
    if (!n.data) {
      n.kind = Next::kNeedsData;  // loaded outside the write transaction
      return n;
    }
    n.kind = Next::kToStart;  // started with the others leased now (start_ready)
    return n;
  }

  // mark_running; false (the task acked) when the trial ended already (a
  // duplicate delivery), a newer attempt owns it, or it is gone.
  bool start(Next& n) {
    if (mark_running(n, n.data->provenance)) {
      // mark_running also set this worker's current trial and logged trial.started.
      if (o_.verbose)
        std::cerr << o_.worker_id << ": trial " << n.trial.index << " attempt " << n.attempt
                  << "\n";
      return true;
    }
    ack(n.lease);
    return false;
  }

  bool load_and_start(Next& n) {
    std::string error;
    try {
      n.data = &dataset(n.run.data);
    } catch (const std::exception& e) {
      error = e.what();
    }
    bool started = false;
    b_.queue->write_together([&] {
      if (n.data)
        started = start(n);
      else
        fail(n, error);
    });
    return started;
  }

  // Trains a started trial; its end goes to pending_, written with the next leases.
  void train(Next& n) {
    TrialObserver obs(*this, n.lease, n.attempt, *n.exp, n.trial, n.run.train.epochs);
    RunResult r;
    const auto t0 = Clock::now();
    keeper_->set_current_trial(n.trial.id);
    try {
      r = train_run(n.run, n.data->data, &obs);
      n.exp->trial_seconds = 0.5 * n.exp->trial_seconds + 0.5 * seconds_since(t0);
      keeper_->set_current_trial(std::nullopt);
    } catch (const std::exception& e) {
      keeper_->set_current_trial(std::nullopt);
      pending_.push_back(PendingEnd{n.lease,
                                    n.trial.id,
                                    n.attempt,
                                    store::TrialStatus::failed,
                                    {},
                                    obs.last_epoch(),
                                    e.what()});
      return;
    }
    if (obs.lost()) {  // someone else has the trial now
      keeper_->drop(n.lease);
      return;
    }
    if (stopping()) {
      // Ctrl-C: give the trial back; its next attempt starts afresh.
      b_.queue->write_together([&] {
        b_.store->release_trial(n.trial.id, n.attempt);
        nack(n.lease, true, "worker stopped");
      });
      return;
    }
    n.exp->scheduler->on_finish(n.trial.index);
    PendingEnd p;
    p.lease = n.lease;
    p.trial_id = n.trial.id;
    p.attempt = n.attempt;
    if (!r.curve.empty()) {
      const auto& last = r.curve.back();
      p.metrics.train_loss = last.train_loss;
      p.metrics.train_acc = last.train_acc;
      p.metrics.val_loss = last.val_loss;
      p.metrics.val_acc = last.val_acc;
    }
    if (n.data->data.test.size()) p.metrics.test_acc = r.test_acc;
    p.metrics.epochs_done = static_cast<int64_t>(r.curve.size());
    p.metrics.seconds = r.train_seconds;
    p.status = obs.pruned() ? store::TrialStatus::pruned : store::TrialStatus::finished;
    p.last_epoch = obs.last_epoch();
    pending_.push_back(std::move(p));
  }

  WorkerOptions o_;
  experiment::Backends b_;
  std::unique_ptr<LeaseKeeper> keeper_;  // the heartbeat thread
  std::map<int64_t, ExperimentCache> cache_;
  std::map<std::string, LoadedData> data_;
  std::vector<PendingEnd> pending_;                // ended trials, written with the next leases
  std::vector<store::EpochWrite> epochs_;          // epochs not written yet (flush_epochs)
  Clock::time_point epochs_since_ = Clock::now();  // the last flush
  Clock::time_point alive_since_ = Clock::now();   // the last keep_alive_due()
  std::deque<Next> ready_;                         // leased trials not trained yet (a prefetch)
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
