// ResultStore: where every experiment, trial, learning curve, worker and event
// is kept. Backends are chosen by URL in open_result_store() and nowhere else.
//
// Writes are idempotent by (trial id, attempt), so a redelivered task can never
// count a trial twice: the queue's lease attempt is the trial's attempt.
//
//   auto store = dnnlab::store::open_result_store("sqlite:runs/sweep.db");
//   ExperimentRecord e;
//   e.name = "depth";
//   e.spec_text = yaml;
//   auto exp = store->create_experiment(e);
//   auto ids = store->add_trials(exp, trials);  // one transaction
//   // in a worker, for a queue lease with attempt a:
//   if (store->mark_running(id, a, "w1")) {
//     store->record_epoch(id, a, epoch_metrics);  // once per epoch
//     store->finish_trial(id, a, TrialStatus::finished, metrics);  // false if stale
//   }
//   TrialQuery top;
//   top.sort_by = "val_acc";
//   top.descending = true;
//   auto best20 = store->trials(exp, top);
//
// Objects are not thread-safe; open one per thread, and in each process after
// fork(). Bad input (unknown sort column, ids that do not exist) throws
// std::invalid_argument naming the field; nothing stored is changed.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace dnnlab::db {
class Connections;
}

namespace dnnlab::store {

enum class ExperimentStatus { running, finished, cancelled, failed };
enum class TrialStatus { queued, running, finished, pruned, failed, cancelled };
enum class WorkerKind { native, browser };

std::string_view to_string(ExperimentStatus s);
std::string_view to_string(TrialStatus s);
std::string_view to_string(WorkerKind k);
// Throw std::invalid_argument naming `field` for an unknown name.
ExperimentStatus parse_experiment_status(std::string_view s, std::string_view field = "status");
TrialStatus parse_trial_status(std::string_view s, std::string_view field = "status");
WorkerKind parse_worker_kind(std::string_view s, std::string_view field = "kind");

struct ExperimentRecord {
  std::int64_t id = 0;  // set by the store
  std::string name;
  std::string spec_text;
  std::string spec_hash;  // sha256 of spec_text, set by the store
  std::string spec_path;
  std::string method;  // "grid", "random", "tpe", ...
  double created_at = 0.0;
  ExperimentStatus status = ExperimentStatus::running;
  nlohmann::json provenance = nlohmann::json::object();
  // The highest trial index whose task the coordinator knows it published
  // (set_published); -1: none. Recovery republishes queued trials above it.
  std::int64_t published_index = -1;
};

// A trial to add: its place in the sweep and what to train.
struct NewTrial {
  std::int64_t index = 0;  // unique within the experiment
  std::string config_json;
  std::uint64_t seed = 0;
};

struct TrialMetrics {
  std::optional<double> train_loss, train_acc, val_loss, val_acc, test_acc;
  std::int64_t epochs_done = 0;
  double seconds = 0.0;
};

struct EpochMetrics {
  std::int64_t epoch = 0;
  std::optional<double> train_loss, train_acc, val_loss, val_acc;
  double seconds = 0.0;
  std::optional<double> lr;
};

struct TrialRecord {
  std::int64_t id = 0;
  std::int64_t experiment_id = 0;
  std::int64_t index = 0;
  std::string config_json;
  std::uint64_t seed = 0;
  TrialStatus status = TrialStatus::queued;
  int attempt = 0;  // 0 until first mark_running
  std::string worker;
  std::optional<double> started_at, finished_at;
  TrialMetrics metrics;
  std::string error;
  nlohmann::json provenance = nlohmann::json::object();  // build id, compiler, kernel, data sha256
  std::vector<EpochMetrics> curve;  // filled by trial(id) only: the current attempt's epochs
  // From an untrusted client and not yet verified: not an experiment's best,
  // not fed to adaptive samplers, not in epochs_for (set_provisional).
  bool provisional = false;
  // Kept by the user: its weights survive the retention rule (set_pinned).
  bool pinned = false;
};

struct TrialQuery {
  // One of: id, index, seed, status, attempt, started_at, finished_at, train_loss,
  // train_acc, val_loss, val_acc, test_acc, epochs_done, seconds, worker; or params.NAME
  // (NAME: letters, digits, _) for a parameter: numbers by value, strings as text. Empty
  // values sort last; seeds sort as the unsigned 64-bit numbers they are; ties by index.
  std::string sort_by = "index";
  bool descending = false;
  std::optional<TrialStatus> status;  // only trials in this state
  std::optional<std::string> worker;  // only trials whose worker is this id
  std::int64_t limit = 100;           // 0: no limit
  std::int64_t offset = 0;
};

struct TrialCounts {
  std::int64_t queued = 0, running = 0, finished = 0, pruned = 0, failed = 0, cancelled = 0;
  std::int64_t total() const { return queued + running + finished + pruned + failed + cancelled; }
  // The count of one status (each backend fills the struct from rows of
  // (status, n) through this).
  std::int64_t& of(TrialStatus s) {
    switch (s) {
      case TrialStatus::queued:
        return queued;
      case TrialStatus::running:
        return running;
      case TrialStatus::finished:
        return finished;
      case TrialStatus::pruned:
        return pruned;
      case TrialStatus::failed:
        return failed;
      case TrialStatus::cancelled:
        return cancelled;
    }
    return queued;  // unreachable: parse_trial_status throws on anything else
  }
};

// One trial's metrics at one epoch (for ASHA rung decisions).
struct TrialEpoch {
  std::int64_t trial_id = 0;
  std::int64_t trial_index = 0;
  EpochMetrics metrics;
};

// A trial's current attempt as an early-stopping scheduler follows it
// (curves_since): its stored epochs, and whether they count (a provisional
// trial's do not).
struct TrialCurve {
  std::int64_t trial_id = 0;
  std::int64_t index = 0;
  int attempt = 0;
  bool provisional = false;
  std::vector<EpochMetrics> curve;  // the current attempt's epochs, by epoch
};
// The trials whose counted epochs may have changed since an event cursor.
struct CurveChanges {
  std::int64_t cursor = 0;         // the last event read: the next call's after_id
  bool more = false;               // `limit` events were read: call again from `cursor`
  std::vector<TrialCurve> trials;  // by trial id, each once
};

struct WorkerRecord {
  std::string id;
  WorkerKind kind = WorkerKind::native;
  std::string host;
  std::int64_t pid = 0;
  double started_at = 0.0;
  // Kept by the store:
  double last_seen = 0.0;
  std::optional<std::int64_t> current_trial;
  bool gone = false;
};

// A worker's results in one write (record_results): epochs of running
// attempts, trials' ends and the starts of the trials it leased next. A
// flush, not a unit of meaning: each item is decided as record_epoch /
// finish_trial / mark_running would decide it alone.
struct EpochWrite {
  std::int64_t trial_id = 0;
  int attempt = 0;
  EpochMetrics metrics;
};
struct TrialEnd {
  std::int64_t trial_id = 0;
  int attempt = 0;
  TrialStatus status = TrialStatus::finished;
  TrialMetrics metrics;
  std::string error;
};
struct TrialStart {
  std::int64_t trial_id = 0;
  int attempt = 0;
  std::string worker;
  nlohmann::json provenance = nlohmann::json::object();
};
struct ResultBatch {
  std::vector<EpochWrite> epochs;
  std::vector<TrialEnd> ends;
  std::vector<TrialStart> starts;  // decided after the ends
  bool empty() const { return epochs.empty() && ends.empty() && starts.empty(); }
  std::size_t size() const { return epochs.size() + ends.size() + starts.size(); }
};
// What record_epoch / finish_trial / mark_running would have returned, item by item.
struct BatchOutcome {
  std::vector<bool> epochs, ends, starts;
};

// A finished trial's trained weights: one safetensors file, kept under the
// experiment's retention rule (experiment/weights_retention.hpp decides;
// the store only keeps, lists and drops them).
struct WeightsRecord {
  std::int64_t trial_id = 0;
  std::int64_t experiment_id = 0;
  std::int64_t size = 0;    // bytes
  std::string sha256;       // lower-case hex of the bytes, taken when they were put
  double created_at = 0.0;  // unix seconds
  bool pinned = false;      // the trial's pin (weights_of)
  TrialMetrics metrics;     // the trial's final metrics (weights_of)
  std::string bytes;        // the file (weights() only)
};
// The most bytes one trial's weights may take: a larger file is refused
// (put_weights throws std::invalid_argument saying so).
constexpr std::int64_t kMaxWeightsBytes = std::int64_t{64} << 20;

struct EventRecord {
  std::int64_t id = 0;  // increasing; never reused
  double time = 0.0;
  std::string type;  // "trial.started", "trial.epoch", "worker.joined", ...
  nlohmann::json data;
};

class ResultStore {
 public:
  virtual ~ResultStore() = default;

  // ---- experiments ----
  // created_at 0 means now. Returns the new id.
  virtual std::int64_t create_experiment(const ExperimentRecord& experiment) = 0;
  virtual std::optional<ExperimentRecord> experiment(std::int64_t id) = 0;
  virtual std::vector<ExperimentRecord> experiments() = 0;  // newest first
  virtual void set_status(std::int64_t experiment_id, ExperimentStatus status) = 0;
  // The newest experiment with this name and spec hash (to resume it).
  virtual std::optional<ExperimentRecord> find_experiment(std::string_view name,
                                                          std::string_view spec_hash) = 0;
  // One coordinator per experiment: a lease in the store. Takes or renews
  // it for `holder` until now + `seconds`; true when `holder` holds it now
  // (it was free, expired, or `holder`'s already), false, changing nothing,
  // while another holder's lease runs. A coordinator that stops releases it;
  // one that dies leaves it to expire, and the next one takes it over.
  virtual bool acquire_coordinator(std::int64_t experiment_id, std::string_view holder,
                                   double seconds) = 0;
  // Gives the lease up if `holder` holds it; otherwise changes nothing.
  virtual void release_coordinator(std::int64_t experiment_id, std::string_view holder) = 0;
  // The holder of the experiment's unexpired coordinator lease, if any.
  virtual std::optional<std::string> coordinator(std::int64_t experiment_id) = 0;
  // Records that the tasks of the trials up to `index` were published (it
  // only ever rises). A coordinator taking over republishes the queued
  // trials above it: the queue cannot say which tasks it holds.
  virtual void set_published(std::int64_t experiment_id, std::int64_t index) = 0;

  // ---- trials ----
  // All trials in one transaction; ids in input order. Throws on a duplicate index.
  virtual std::vector<std::int64_t> add_trials(std::int64_t experiment_id,
                                               const std::vector<NewTrial>& trials) = 0;
  // Starts (or restarts, for a redelivery) a trial. False, changing nothing,
  // when the trial already ended, `attempt` is older than its current one,
  // or the trial runs `attempt` already on another worker: a task delivered
  // twice with one attempt (published twice by a recovery) runs once. The
  // same (attempt, worker) again is true: a retried call is harmless.
  virtual bool mark_running(std::int64_t trial_id, int attempt, std::string_view worker_id,
                            const nlohmann::json& provenance = nlohmann::json::object()) = 0;
  // Idempotent by (trial, attempt, epoch). False, changing nothing, when
  // `attempt` is not the trial's running attempt.
  virtual bool record_epoch(std::int64_t trial_id, int attempt, const EpochMetrics& metrics) = 0;
  // Ends a trial (status finished, pruned, failed or cancelled). Idempotent by
  // (trial, attempt): false, changing nothing, when the trial already ended or
  // `attempt` is not its current one.
  virtual bool finish_trial(std::int64_t trial_id, int attempt, TrialStatus status,
                            const TrialMetrics& metrics, std::string_view error = {}) = 0;
  // Writes `batch` in one transaction: every epoch (in order), then every
  // end, then every start, each with exactly the effect and answer
  // record_epoch / finish_trial / mark_running would have had. The PostgreSQL backend sends a batch
  // as a few set-based statements (a handful of round trips and one commit for any number of rows);
  // that is what a worker's results go through. All or nothing: an exception keeps none of it, and
  // the batch may be sent again as it is (writes are idempotent by trial, attempt and epoch).
  virtual BatchOutcome record_results(const ResultBatch& batch) = 0;
  // Gives a running trial back (its worker stopped before the end): status
  // queued again, the next attempt starts afresh. False, changing nothing,
  // when `attempt` is not its running attempt.
  virtual bool release_trial(std::int64_t trial_id, int attempt) = 0;
  // Puts a trial that ended (finished, pruned or failed) back to queued: its
  // final metrics, finished_at, error and worker are cleared, its stored
  // epochs are kept (they belong to the old attempt, which the curve no longer
  // shows once a newer attempt runs), and a "trial.reopened" event {trial,
  // experiment, attempt} is appended. Returns the trial's current attempt:
  // publish a new task with TrialTask::attempt_base = that value so the next
  // run is a newer attempt. nullopt, changing nothing, when the trial has not
  // ended or was cancelled. Throws std::invalid_argument for an unknown id.
  virtual std::optional<int> reopen_trial(std::int64_t trial_id) = 0;
  // Cancels an experiment's trials that have not ended; returns how many.
  // epochs_done becomes the current attempt's stored epoch count (what the
  // curve shows), and each trial that was running gets a trial.cancelled
  // event {experiment, trial, index, worker, attempt, epochs}, in one commit.
  virtual std::int64_t cancel_trials(std::int64_t experiment_id) = 0;

  virtual std::vector<TrialRecord> trials(std::int64_t experiment_id, const TrialQuery& query) = 0;
  virtual std::optional<TrialRecord> trial(std::int64_t trial_id) = 0;  // with its curve
  virtual TrialCounts trial_counts(std::int64_t experiment_id) = 0;
  // Marks the trial's current attempt provisional (an untrusted client's
  // result, not yet verified) or not, with a "trial.provisional" event
  // {experiment, trial, attempt, provisional}. mark_running clears it. False,
  // changing nothing, when `attempt` is not the trial's current one.
  virtual bool set_provisional(std::int64_t trial_id, int attempt, bool provisional) = 0;
  // Adds `patch`'s keys to the current attempt's provenance (a JSON merge
  // patch: a browser's backend and adapter, known only when it reports).
  // False, changing nothing, when `attempt` is not the trial's current one.
  virtual bool merge_provenance(std::int64_t trial_id, int attempt,
                                const nlohmann::json& patch) = 0;
  // The finished, not provisional trial with the best `metric` (a TrialQuery sort column).
  virtual std::optional<TrialRecord> best_trial(std::int64_t experiment_id,
                                                std::string_view metric = "val_acc",
                                                bool maximize = true) = 0;
  // Every trial's metrics at `epoch` (current attempts, not provisional).
  virtual std::vector<TrialEpoch> epochs_for(std::int64_t experiment_id, std::int64_t epoch) = 0;
  // Follows an experiment's epochs incrementally (experiment::SchedulerFeed):
  // the trials of `experiment_id` named by a trial.epoch, trial.started or
  // trial.provisional event with id in (after_id, cursor], each as it is now
  // (current attempt, its epochs, provisional or not), reading at most
  // `limit` (1..10000) events. Every change to what a trial's epochs count
  // for (an epoch stored, a new attempt, set_provisional) appends one of
  // those events, so a reader that applies each answer and passes `cursor`
  // on holds every trial as the store does; the cost is that of the events
  // since `after_id`, not of the experiment's size. after_id 0: every trial
  // of the experiment that ever ran, and the newest event id as cursor.
  virtual CurveChanges curves_since(std::int64_t experiment_id, std::int64_t after_id,
                                    std::int64_t limit = 10000) = 0;

  // ---- weights (schema 9: table trial_weights, column trials.pinned) ----
  // Keeps `safetensors` as the trial's weights, replacing any kept before.
  // Throws std::invalid_argument for an unknown trial, an empty file or one
  // over kMaxWeightsBytes. Which trials keep weights is the caller's rule.
  virtual void put_weights(std::int64_t trial_id, std::string_view safetensors) = 0;
  // The trial's kept weights with their bytes; nullopt when none are kept.
  virtual std::optional<WeightsRecord> weights(std::int64_t trial_id) = 0;
  // The experiment's kept weights without their bytes, each with its trial's
  // metrics and pin, by trial id.
  virtual std::vector<WeightsRecord> weights_of(std::int64_t experiment_id) = 0;
  // Drops the trial's weights; false when none were kept.
  virtual bool delete_weights(std::int64_t trial_id) = 0;
  // Pins a trial (its weights are kept whatever its rank) or unpins it.
  // Throws std::invalid_argument for an unknown trial.
  virtual void set_pinned(std::int64_t trial_id, bool pinned) = 0;

  // ---- workers ----
  virtual void upsert_worker(const WorkerRecord& worker) = 0;
  // Throws std::invalid_argument for a worker never upserted.
  virtual void heartbeat(std::string_view worker_id, std::optional<std::int64_t> current_trial) = 0;
  virtual std::vector<WorkerRecord> workers() = 0;
  virtual void mark_worker_gone(std::string_view worker_id) = 0;
  // Deletes the rows of workers of `kind` that left and were last seen
  // before this time (unix seconds); returns how many.
  virtual std::int64_t forget_gone_workers(WorkerKind kind, double last_seen_before) = 0;

  // ---- events (append-only) ----
  // mark_running, record_epoch and finish_trial append their own events
  // (trial.started, trial.epoch, trial.finished/pruned/failed) in the same
  // transaction; append_event is for everything else.
  virtual std::int64_t append_event(std::string_view type, const nlohmann::json& data) = 0;
  // Events with id > after_id, oldest first, at most `limit` (1..10000).
  virtual std::vector<EventRecord> events_since(std::int64_t after_id,
                                                std::int64_t limit = 1000) = 0;
  // Every event of one type, oldest first: for the rare kinds a service
  // rebuilds its state from when it starts (e.g. worker.quarantined).
  virtual std::vector<EventRecord> events_of_type(std::string_view type) = 0;
};

// A metric by name (val_acc, val_loss, train_acc, train_loss; test_acc for
// final metrics); nullopt when the name is unknown or the value unset.
std::optional<double> metric(const TrialMetrics& m, std::string_view name);
std::optional<double> metric(const EpochMetrics& m, std::string_view name);

// The hash find_experiment() matches: lower-case hex sha256 of the spec text.
std::string spec_hash(std::string_view spec_text);

// The store's server could not be reached for StoreOptions::reconnect_seconds
// (the call reconnected with backoff meanwhile). Nothing of the call was
// kept, unless commit_unknown(): the connection went while the commit was on
// its way, and the call was not one that is safe to send twice.
class StoreUnavailableError : public std::runtime_error {
 public:
  StoreUnavailableError(const std::string& message, bool commit_unknown)
      : std::runtime_error(message), commit_unknown_(commit_unknown) {}
  bool commit_unknown() const noexcept { return commit_unknown_; }

 private:
  bool commit_unknown_;
};

struct StoreOptions {
  // A server store (postgres://) whose connection is lost retries the call
  // on a new connection, backing off from 50 ms to 2 s, for this long; then
  // it throws StoreUnavailableError. 0: throw at once (the next call
  // reconnects). The embedded store has no connection to lose.
  double reconnect_seconds = 300.0;
};

// The backend is not compiled into this build, or not available yet.
class BackendNotBuiltError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Opens a store by URL:
//   sqlite:PATH      embedded, one file shared by processes on this machine
//   postgres://…     PostgreSQL (libpq URL: user, password, host, port, dbname,
//                    ?sslmode=…); BackendNotBuiltError in a build without it
// Any other URL throws std::invalid_argument naming it. A file written by a
// newer dnnlab throws std::runtime_error saying so. With `shared`, a queue
// opened through the same db::Connections on the same embedded file shares
// the connection, so queue.write_together() commits the writes of both at
// once; use the two from one thread only.
std::unique_ptr<ResultStore> open_result_store(std::string_view url,
                                               db::Connections* shared = nullptr,
                                               const StoreOptions& options = {});

}  // namespace dnnlab::store
