// The embedded ResultStore: tables in one SQLite file (WAL) that the
// coordinator, the server and the local worker processes open side by side.
#pragma once

#include <memory>
#include <string>

#include "db/sqlite_db.hpp"
#include "store/result_store.hpp"

namespace dnnlab::store {

class SqliteResultStore final : public ResultStore {
 public:
  // On a connection of its own, or one a queue uses too (db::Connections):
  // then their writes can commit together.
  explicit SqliteResultStore(std::shared_ptr<sqlite::Database> db);

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
  bool set_provisional(std::int64_t trial_id, int attempt, bool provisional) override;
  bool merge_provenance(std::int64_t trial_id, int attempt, const nlohmann::json& patch) override;

  std::int64_t append_event(std::string_view type, const nlohmann::json& data) override;
  std::vector<EventRecord> events_since(std::int64_t after_id, std::int64_t limit) override;
  std::vector<EventRecord> events_of_type(std::string_view type) override;

  static constexpr int kSchemaVersion = 9;

 private:
  void require_experiment(std::int64_t experiment_id);
  void require_trial(std::int64_t trial_id);
  std::int64_t write_event(double time, std::string_view type, const nlohmann::json& data);
  void count(std::int64_t experiment_id, std::string_view status, std::int64_t n);

  std::shared_ptr<sqlite::Database> db_;
};

}  // namespace dnnlab::store
