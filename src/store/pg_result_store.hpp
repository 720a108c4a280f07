// The PostgreSQL ResultStore (postgres://…): the embedded backend's schema and
// semantics on a server every machine of a cluster reaches. Trial writes
// carry (trial id, attempt) in their WHERE clause; events get commit-ordered
// ids from a locked counter (see trial_events.hpp for why).
#pragma once

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "db/pg_db.hpp"
#include "store/result_store.hpp"

namespace dnnlab::store {

class PgResultStore final : public ResultStore {
 public:
  explicit PgResultStore(const std::string& url, const StoreOptions& options = {});

  std::int64_t create_experiment(const ExperimentRecord& experiment) override;
  std::optional<ExperimentRecord> experiment(std::int64_t id) override;
  std::vector<ExperimentRecord> experiments() override;
  void set_status(std::int64_t experiment_id, ExperimentStatus status) override;
  std::optional<ExperimentRecord> find_experiment(std::string_view name,
                                                  std::string_view spec_hash) override;
  bool acquire_coordinator(std::int64_t experiment_id, std::string_view holder,
                           double seconds) override;
  void release_coordinator(std::int64_t experiment_id, std::string_view holder) override;
  std::optional<std::string> coordinator(std::int64_t experiment_id) override;
  void set_published(std::int64_t experiment_id, std::int64_t index) override;

  std::vector<std::int64_t> add_trials(std::int64_t experiment_id,
                                       const std::vector<NewTrial>& trials) override;
  bool mark_running(std::int64_t trial_id, int attempt, std::string_view worker_id,
                    const nlohmann::json& provenance) override;
  bool record_epoch(std::int64_t trial_id, int attempt, const EpochMetrics& metrics) override;
  BatchOutcome record_results(const ResultBatch& batch) override;
  bool finish_trial(std::int64_t trial_id, int attempt, TrialStatus status,
                    const TrialMetrics& metrics, std::string_view error) override;
  bool release_trial(std::int64_t trial_id, int attempt) override;
  std::optional<int> reopen_trial(std::int64_t trial_id) override;
  std::int64_t cancel_trials(std::int64_t experiment_id) override;

  std::vector<TrialRecord> trials(std::int64_t experiment_id, const TrialQuery& query) override;
  std::optional<TrialRecord> trial(std::int64_t trial_id) override;
  TrialCounts trial_counts(std::int64_t experiment_id) override;
  std::optional<TrialRecord> best_trial(std::int64_t experiment_id, std::string_view metric,
                                        bool maximize) override;
  std::vector<TrialEpoch> epochs_for(std::int64_t experiment_id, std::int64_t epoch) override;
  CurveChanges curves_since(std::int64_t experiment_id, std::int64_t after_id,
                            std::int64_t limit) override;
  bool set_provisional(std::int64_t trial_id, int attempt, bool provisional) override;
  bool merge_provenance(std::int64_t trial_id, int attempt, const nlohmann::json& patch) override;

  void put_weights(std::int64_t trial_id, std::string_view safetensors) override;
  std::optional<WeightsRecord> weights(std::int64_t trial_id) override;
  std::vector<WeightsRecord> weights_of(std::int64_t experiment_id) override;
  bool delete_weights(std::int64_t trial_id) override;
  void set_pinned(std::int64_t trial_id, bool pinned) override;

  void upsert_worker(const WorkerRecord& worker) override;
  void heartbeat(std::string_view worker_id, std::optional<std::int64_t> current_trial) override;
  std::vector<WorkerRecord> workers() override;
  void mark_worker_gone(std::string_view worker_id) override;
  std::int64_t forget_gone_workers(WorkerKind kind, double last_seen_before) override;

  std::int64_t append_event(std::string_view type, const nlohmann::json& data) override;
  std::vector<EventRecord> events_since(std::int64_t after_id, std::int64_t limit) override;
  std::vector<EventRecord> events_of_type(std::string_view type) override;

  // The same version as the embedded store's schema: one schema, two dialects.
  static constexpr int kSchemaVersion = 9;

  // Statements sent to the server so far (one round trip each).
  std::int64_t round_trips() const { return db_->round_trips(); }

 private:
  // Whether a call may run again after its commit's fate is unknown (the
  // connection went during COMMIT): idempotent writes and reads may.
  enum class Retry { always, unless_commit_unknown };
  // Runs `f` (one call's transaction), and again on a new connection while
  // the server is unreachable, backing off, for options_.reconnect_seconds.
  template <typename F>
  auto retrying(Retry retry, F&& f) -> decltype(f());

  void require_experiment(std::int64_t experiment_id);
  void require_trial(std::int64_t trial_id);
  void write_event(double time, std::string_view type, const nlohmann::json& data);
  void sequence_events();
  void start_locked(std::int64_t trial_id, int attempt, std::string_view worker_id,
                    const nlohmann::json& provenance, bool is_start, std::int64_t experiment_id,
                    std::int64_t index, const std::string& status);
  void count(std::int64_t experiment_id, std::string_view status, std::int64_t n);
  void recount(std::int64_t experiment_id);

  std::unique_ptr<pg::Connection> db_;
  StoreOptions options_;
  bool broken_ = false;  // the connection was lost: reconnect before the next call
};

// A lost connection rolled the call's transaction back (unless COMMIT was
// on its way), so the call runs again from the start on a new one. The wait
// doubles from 50 ms to 2 s: a restarting server is back within seconds,
// and hundreds of workers do not hammer it meanwhile. A deadlock between
// two batches (each rolled back whole) is also run again, at once.
template <typename F>
auto PgResultStore::retrying(Retry retry, F&& f) -> decltype(f()) {
  using Clock = std::chrono::steady_clock;
  const auto deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double>(std::max(0.0, options_.reconnect_seconds)));
  auto pause = std::chrono::milliseconds(50);
  for (;;) {
    try {
      if (broken_) {
        db_->reconnect();
        broken_ = false;
      }
      return f();
    } catch (const pg::Error& e) {
      if (e.sqlstate() == "40P01") continue;  // deadlock_detected: this side was rolled back
      if (!e.connection_lost()) throw;
      broken_ = true;
      if (e.commit_unknown() && retry == Retry::unless_commit_unknown)
        throw StoreUnavailableError(std::string(e.what()) + " (the commit may have happened)",
                                    true);
      if (Clock::now() + pause > deadline)
        throw StoreUnavailableError(
            std::string(e.what()) + " (unreachable for " +
                std::to_string(static_cast<int>(options_.reconnect_seconds)) + " s)",
            false);
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::milliseconds(2000));
    }
  }
}

}  // namespace dnnlab::store
