// SqliteResultStore: experiments, trials, curves, workers and events as SQLite
// tables: the writes (the schema in sqlite_result_schema.cpp, reads in
// sqlite_result_reads.cpp). Trial writes carry (trial id, attempt) in their
// WHERE clause, which is what makes them idempotent across redeliveries.
#include "store/sqlite_result_store.hpp"

#include <cmath>
#include <string>

#include "store/sha256.hpp"
#include "store/store_checks.hpp"
#include "store/trial_events.hpp"

namespace dnnlab::store {
namespace {

using namespace checks;  // NOLINT(google-build-using-namespace): the shared argument checks

}  // namespace

void SqliteResultStore::require_experiment(std::int64_t experiment_id) {
  check_id(experiment_id, "experiment_id");
  auto s = db_->prepare("SELECT 1 FROM experiments WHERE id = ?1");
  s.bind_int(1, experiment_id);
  if (!s.step())
    throw std::invalid_argument("experiment_id " + std::to_string(experiment_id) +
                                " does not exist");
}

void SqliteResultStore::require_trial(std::int64_t trial_id) {
  check_id(trial_id, "trial_id");
  auto s = db_->prepare("SELECT 1 FROM trials WHERE id = ?1");
  s.bind_int(1, trial_id);
  if (!s.step())
    throw std::invalid_argument("trial_id " + std::to_string(trial_id) + " does not exist");
}

// Inside the caller's transaction: one event row.
std::int64_t SqliteResultStore::write_event(double time, std::string_view type,
                                            const nlohmann::json& data) {
  auto s = db_->prepare("INSERT INTO events (time, type, data) VALUES (?1, ?2, ?3)");
  s.bind_double(1, time).bind_text(2, type).bind_text(3, data.dump());
  s.run();
  return db_->last_insert_rowid();
}

// Inside the caller's transaction: `n` more trials of the experiment in `status`.
void SqliteResultStore::count(std::int64_t experiment_id, std::string_view status, std::int64_t n) {
  auto s = db_->prepare(
      "INSERT INTO trial_counts (experiment_id, status, n) VALUES (?1, ?2, ?3) "
      "ON CONFLICT (experiment_id, status) DO UPDATE SET n = n + excluded.n");
  s.bind_int(1, experiment_id).bind_text(2, status).bind_int(3, n);
  s.run();
}

// ---- experiments ----

std::int64_t SqliteResultStore::create_experiment(const ExperimentRecord& e) {
  check_not_empty(e.name, "name");
  auto s = db_->prepare(
      "INSERT INTO experiments (name, spec_text, spec_hash, spec_path, method, created_at, "
      "status, provenance) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)");
  s.bind_text(1, e.name).bind_text(2, e.spec_text).bind_text(3, spec_hash(e.spec_text));
  s.bind_text(4, e.spec_path).bind_text(5, e.method);
  s.bind_double(6, e.created_at > 0 ? e.created_at : sqlite::unix_now());
  s.bind_text(7, to_string(e.status)).bind_text(8, e.provenance.dump());
  s.run();
  return db_->last_insert_rowid();
}

void SqliteResultStore::set_status(std::int64_t experiment_id, ExperimentStatus status) {
  check_id(experiment_id, "experiment_id");
  auto s = db_->prepare("UPDATE experiments SET status = ?2 WHERE id = ?1");
  s.bind_int(1, experiment_id).bind_text(2, to_string(status));
  s.run();
  if (db_->changes() == 0) require_experiment(experiment_id);
}

bool SqliteResultStore::acquire_coordinator(std::int64_t experiment_id, std::string_view holder,
                                            double seconds) {
  check_not_empty(holder, "holder");
  if (!(seconds > 0 && seconds <= 86400))
    throw std::invalid_argument("seconds must be in (0, 86400], got " + std::to_string(seconds));
  require_experiment(experiment_id);
  const double now = sqlite::unix_now();
  auto s = db_->prepare(
      "INSERT INTO coordinator_leases (experiment_id, holder, deadline) VALUES (?1, ?2, ?3) "
      "ON CONFLICT (experiment_id) DO UPDATE SET holder = excluded.holder, "
      "deadline = excluded.deadline WHERE holder = excluded.holder OR deadline < ?4");
  s.bind_int(1, experiment_id).bind_text(2, holder).bind_double(3, now + seconds);
  s.bind_double(4, now);
  s.run();
  return db_->changes() == 1;
}

void SqliteResultStore::release_coordinator(std::int64_t experiment_id, std::string_view holder) {
  check_id(experiment_id, "experiment_id");
  auto s = db_->prepare("DELETE FROM coordinator_leases WHERE experiment_id = ?1 AND holder = ?2");
  s.bind_int(1, experiment_id).bind_text(2, holder);
  s.run();
}

void SqliteResultStore::set_published(std::int64_t experiment_id, std::int64_t index) {
  check_id(experiment_id, "experiment_id");
  auto s = db_->prepare(
      "UPDATE experiments SET published_index = max(published_index, ?2) WHERE id = ?1");
  s.bind_int(1, experiment_id).bind_int(2, index);
  s.run();
  if (db_->changes() == 0) require_experiment(experiment_id);
}

// ---- trials ----

std::vector<std::int64_t> SqliteResultStore::add_trials(std::int64_t experiment_id,
                                                        const std::vector<NewTrial>& trials) {
  for (std::size_t i = 0; i < trials.size(); ++i)
    if (!nlohmann::json::accept(trials[i].config_json))
      throw std::invalid_argument("trials[" + std::to_string(i) +
                                  "].config_json is not valid JSON");
  std::vector<std::int64_t> ids;
  ids.reserve(trials.size());
  sqlite::WriteTransaction tx(*db_);
  require_experiment(experiment_id);
  for (std::size_t i = 0; i < trials.size(); ++i) {
    const NewTrial& t = trials[i];
    auto s = db_->prepare(
        "INSERT INTO trials (experiment_id, idx, config, seed, status) "
        "VALUES (?1, ?2, ?3, ?4, 'queued')");
    s.bind_int(1, experiment_id).bind_int(2, t.index).bind_text(3, t.config_json);
    s.bind_int(4, static_cast<std::int64_t>(t.seed));
    try {
      s.run();
    } catch (const sqlite::Error& e) {
      if (e.code() != SQLITE_CONSTRAINT_UNIQUE) throw;
      throw std::invalid_argument("trials[" + std::to_string(i) + "].index " +
                                  std::to_string(t.index) + " already exists in experiment " +
                                  std::to_string(experiment_id));
    }
    ids.push_back(db_->last_insert_rowid());
  }
  if (!trials.empty()) count(experiment_id, "queued", static_cast<std::int64_t>(trials.size()));
  tx.commit();
  return ids;
}

bool SqliteResultStore::mark_running(std::int64_t trial_id, int attempt, std::string_view worker_id,
                                     const nlohmann::json& provenance) {
  check_id(trial_id, "trial_id");
  check_attempt(attempt, 1);
  check_not_empty(worker_id, "worker_id");
  sqlite::WriteTransaction tx(*db_);
  std::int64_t experiment_id = 0, index = 0;
  std::string status;
  trial_events::StartDecision d;
  {
    auto q = db_->prepare(
        "SELECT experiment_id, idx, status, attempt, worker FROM trials WHERE id = ?1");
    q.bind_int(1, trial_id);
    if (!q.step())
      throw std::invalid_argument("trial_id " + std::to_string(trial_id) + " does not exist");
    experiment_id = q.column_int(0);
    index = q.column_int(1);
    status = q.column_text(2);
    d = trial_events::decide_start(status, static_cast<int>(q.column_int(3)), q.column_text(4),
                                   attempt, worker_id);
  }
  if (!d.allowed) return false;  // the empty transaction rolls back
  const double now = sqlite::unix_now();
  auto s = db_->prepare(
      "UPDATE trials SET status = 'running', attempt = ?2, worker = ?3, started_at = ?4, "
      "finished_at = NULL, train_loss = NULL, train_acc = NULL, val_loss = NULL, "
      "val_acc = NULL, test_acc = NULL, epochs_done = 0, seconds = 0, error = '', "
      "provenance = ?5, provisional = 0 WHERE id = ?1");
  s.bind_int(1, trial_id).bind_int(2, attempt).bind_text(3, worker_id);
  s.bind_double(4, now).bind_text(5, provenance.dump());
  s.run();
  if (d.is_start) {
    write_event(now, "trial.started",
                trial_events::started(experiment_id, trial_id, index, worker_id, attempt));
    auto w = db_->prepare("UPDATE workers SET current_trial = ?2, last_seen = ?3 WHERE id = ?1");
    w.bind_text(1, worker_id).bind_int(2, trial_id).bind_double(3, now);
    w.run();
  }
  if (status != "running") {
    count(experiment_id, status, -1);
    count(experiment_id, "running", 1);
  }
  tx.commit();
  return true;
}

bool SqliteResultStore::record_epoch(std::int64_t trial_id, int attempt, const EpochMetrics& m) {
  check_id(trial_id, "trial_id");
  check_attempt(attempt, 1);
  if (m.epoch < 0)
    throw std::invalid_argument("epoch must not be negative, got " + std::to_string(m.epoch));
  sqlite::WriteTransaction tx(*db_);
  std::int64_t experiment_id = 0;
  {
    auto q = db_->prepare(
        "SELECT experiment_id FROM trials WHERE id = ?1 AND attempt = ?2 AND status = 'running'");
    q.bind_int(1, trial_id).bind_int(2, attempt);
    if (!q.step()) {
      require_trial(trial_id);
      return false;
    }
    experiment_id = q.column_int(0);
  }
  auto s = db_->prepare(
      "INSERT OR REPLACE INTO epochs (trial_id, attempt, epoch, train_loss, train_acc, val_loss, "
      "val_acc, seconds, lr) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)");
  s.bind_int(1, trial_id).bind_int(2, attempt).bind_int(3, m.epoch);
  s.bind_opt_double(4, m.train_loss).bind_opt_double(5, m.train_acc);
  s.bind_opt_double(6, m.val_loss).bind_opt_double(7, m.val_acc);
  s.bind_double(8, std::isfinite(m.seconds) ? m.seconds : 0.0).bind_opt_double(9, m.lr);
  s.run();
  write_event(sqlite::unix_now(), "trial.epoch",
              trial_events::epoch(experiment_id, trial_id, m.epoch, m.val_acc, m.train_loss));
  tx.commit();
  return true;
}

// One write transaction around the item-by-item writes (each a savepoint
// in it): one commit and one fsync for the batch. SQLite has no round trips
// to save.
BatchOutcome SqliteResultStore::record_results(const ResultBatch& batch) {
  BatchOutcome out;
  sqlite::WriteTransaction tx(*db_);
  for (const EpochWrite& e : batch.epochs)
    out.epochs.push_back(record_epoch(e.trial_id, e.attempt, e.metrics));
  for (const TrialEnd& t : batch.ends)
    out.ends.push_back(finish_trial(t.trial_id, t.attempt, t.status, t.metrics, t.error));
  for (const TrialStart& t : batch.starts)
    out.starts.push_back(mark_running(t.trial_id, t.attempt, t.worker, t.provenance));
  tx.commit();
  return out;
}

bool SqliteResultStore::finish_trial(std::int64_t trial_id, int attempt, TrialStatus status,
                                     const TrialMetrics& m, std::string_view error) {
  check_id(trial_id, "trial_id");
  check_attempt(attempt, 0);
  if (!is_terminal(status))
    throw std::invalid_argument("status must be finished, pruned, failed or cancelled, got " +
                                std::string(to_string(status)));
  sqlite::WriteTransaction tx(*db_);
  std::int64_t experiment_id = 0, index = 0;
  std::string old_status;
  {
    auto q = db_->prepare(
        "SELECT experiment_id, idx, status FROM trials WHERE id = ?1 AND attempt = ?2 "
        "AND status IN ('queued', 'running')");
    q.bind_int(1, trial_id).bind_int(2, attempt);
    if (!q.step()) {
      require_trial(trial_id);
      return false;
    }
    experiment_id = q.column_int(0);
    index = q.column_int(1);
    old_status = q.column_text(2);
  }
  const double now = sqlite::unix_now();
  auto s = db_->prepare(
      "UPDATE trials SET status = ?3, finished_at = ?4, train_loss = ?5, train_acc = ?6, "
      "val_loss = ?7, val_acc = ?8, test_acc = ?9, epochs_done = ?10, seconds = ?11, "
      "error = ?12 WHERE id = ?1 AND attempt = ?2");
  s.bind_int(1, trial_id).bind_int(2, attempt).bind_text(3, to_string(status));
  s.bind_double(4, now);
  s.bind_opt_double(5, m.train_loss).bind_opt_double(6, m.train_acc);
  s.bind_opt_double(7, m.val_loss).bind_opt_double(8, m.val_acc).bind_opt_double(9, m.test_acc);
  s.bind_int(10, m.epochs_done).bind_double(11, std::isfinite(m.seconds) ? m.seconds : 0.0);
  s.bind_text(12, error);
  s.run();
  if (status != TrialStatus::cancelled)
    write_event(
        now, "trial." + std::string(to_string(status)),
        trial_events::ended(experiment_id, trial_id, index, m.val_acc, m.epochs_done, error));
  count(experiment_id, old_status, -1);
  count(experiment_id, to_string(status), 1);
  tx.commit();
  return true;
}

bool SqliteResultStore::release_trial(std::int64_t trial_id, int attempt) {
  check_id(trial_id, "trial_id");
  check_attempt(attempt, 1);
  sqlite::WriteTransaction tx(*db_);
  auto s = db_->prepare(
      "UPDATE trials SET status = 'queued', worker = '', started_at = NULL "
      "WHERE id = ?1 AND attempt = ?2 AND status = 'running' RETURNING experiment_id");
  s.bind_int(1, trial_id).bind_int(2, attempt);
  if (!s.step()) {
    require_trial(trial_id);
    return false;
  }
  const std::int64_t experiment_id = s.column_int(0);
  s.run();  // finish the RETURNING statement
  count(experiment_id, "running", -1);
  count(experiment_id, "queued", 1);
  tx.commit();
  return true;
}

std::optional<int> SqliteResultStore::reopen_trial(std::int64_t trial_id) {
  check_id(trial_id, "trial_id");
  sqlite::WriteTransaction tx(*db_);
  std::optional<int> attempt;
  std::string old_status;
  {
    auto q = db_->prepare("SELECT status FROM trials WHERE id = ?1");
    q.bind_int(1, trial_id);
    if (q.step()) old_status = q.column_text(0);
  }
  {
    // Keeps attempt (the next run is newer) and provenance (overwritten by
    // mark_running); started_at goes like release_trial's.
    auto s = db_->prepare(
        "UPDATE trials SET status = 'queued', worker = '', started_at = NULL, "
        "finished_at = NULL, train_loss = NULL, train_acc = NULL, val_loss = NULL, "
        "val_acc = NULL, test_acc = NULL, epochs_done = 0, seconds = 0, error = '' "
        "WHERE id = ?1 AND status IN ('finished', 'pruned', 'failed') "
        "RETURNING experiment_id, attempt");
    s.bind_int(1, trial_id);
    if (s.step()) {
      const std::int64_t experiment_id = s.column_int(0);
      attempt = static_cast<int>(s.column_int(1));
      s.run();  // finish the RETURNING statement before the next one
      write_event(sqlite::unix_now(), "trial.reopened",
                  {{"trial", trial_id}, {"experiment", experiment_id}, {"attempt", *attempt}});
      count(experiment_id, old_status, -1);
      count(experiment_id, "queued", 1);
    }
  }
  if (!attempt) {
    require_trial(trial_id);
    return std::nullopt;  // the empty transaction rolls back: nothing changed
  }
  tx.commit();
  return attempt;
}

std::int64_t SqliteResultStore::cancel_trials(std::int64_t experiment_id) {
  sqlite::WriteTransaction tx(*db_);
  require_experiment(experiment_id);
  const double now = sqlite::unix_now();
  // epochs_done counts the current attempt's stored epochs (what the curve
  // shows): a running trial's were only ever written by finish_trial.
  constexpr std::string_view kEpochsDone =
      "(SELECT count(*) FROM epochs e WHERE e.trial_id = t.id AND e.attempt = t.attempt)";
  {
    // Only running trials get an event: they had a trial.started, and a
    // dashboard must see them end. Queued ones end with experiment.cancelled.
    auto e = db_->prepare(
        "INSERT INTO events (time, type, data) SELECT ?2, 'trial.cancelled', "
        "json_object('experiment', t.experiment_id, 'trial', t.id, 'index', t.idx, "
        "'worker', t.worker, 'attempt', t.attempt, 'epochs', " +
        std::string(kEpochsDone) +
        ") FROM trials t WHERE t.experiment_id = ?1 AND t.status = 'running' ORDER BY t.id");
    e.bind_int(1, experiment_id).bind_double(2, now);
    e.run();
  }
  auto s =
      db_->prepare("UPDATE trials AS t SET status = 'cancelled', finished_at = ?2, epochs_done = " +
                   std::string(kEpochsDone) +
                   " WHERE t.experiment_id = ?1 AND t.status IN ('queued', 'running')");
  s.bind_int(1, experiment_id).bind_double(2, now);
  s.run();
  const std::int64_t n = db_->changes();
  if (n > 0) {
    // A rare, bulk change: count the experiment's trials again.
    auto d = db_->prepare("DELETE FROM trial_counts WHERE experiment_id = ?1");
    d.bind_int(1, experiment_id);
    d.run();
    auto c = db_->prepare(
        "INSERT INTO trial_counts (experiment_id, status, n) SELECT experiment_id, status, "
        "count(*) FROM trials WHERE experiment_id = ?1 GROUP BY status");
    c.bind_int(1, experiment_id);
    c.run();
  }
  tx.commit();
  return n;
}

// ---- workers ----

void SqliteResultStore::upsert_worker(const WorkerRecord& w) {
  check_not_empty(w.id, "worker id");
  const double now = sqlite::unix_now();
  auto s = db_->prepare(
      "INSERT INTO workers (id, kind, host, pid, started_at, last_seen, current_trial, gone) "
      "VALUES (?1, ?2, ?3, ?4, ?5, ?6, NULL, 0) ON CONFLICT (id) DO UPDATE SET "
      "kind = excluded.kind, host = excluded.host, pid = excluded.pid, "
      "started_at = excluded.started_at, last_seen = excluded.last_seen, current_trial = NULL, "
      "gone = 0");
  s.bind_text(1, w.id).bind_text(2, to_string(w.kind)).bind_text(3, w.host).bind_int(4, w.pid);
  s.bind_double(5, w.started_at > 0 ? w.started_at : now).bind_double(6, now);
  s.run();
}

void SqliteResultStore::heartbeat(std::string_view worker_id,
                                  std::optional<std::int64_t> current_trial) {
  check_not_empty(worker_id, "worker_id");
  auto s =
      db_->prepare("UPDATE workers SET last_seen = ?2, current_trial = ?3, gone = 0 WHERE id = ?1");
  s.bind_text(1, worker_id).bind_double(2, sqlite::unix_now());
  if (current_trial)
    s.bind_int(3, *current_trial);
  else
    s.bind_null(3);
  s.run();
  if (db_->changes() == 0)
    throw std::invalid_argument("worker_id '" + std::string(worker_id) +
                                "' is not registered (upsert_worker first)");
}

void SqliteResultStore::mark_worker_gone(std::string_view worker_id) {
  check_not_empty(worker_id, "worker_id");
  auto s = db_->prepare("UPDATE workers SET gone = 1, current_trial = NULL WHERE id = ?1");
  s.bind_text(1, worker_id);
  s.run();
  if (db_->changes() == 0)
    throw std::invalid_argument("worker_id '" + std::string(worker_id) + "' is not registered");
}

bool SqliteResultStore::set_provisional(std::int64_t trial_id, int attempt, bool provisional) {
  check_id(trial_id, "trial_id");
  check_attempt(attempt, 1);
  sqlite::WriteTransaction tx(*db_);
  auto s = db_->prepare(
      "UPDATE trials SET provisional = ?3 WHERE id = ?1 AND attempt = ?2 RETURNING experiment_id");
  s.bind_int(1, trial_id).bind_int(2, attempt).bind_int(3, provisional ? 1 : 0);
  if (!s.step()) {
    require_trial(trial_id);
    return false;
  }
  const std::int64_t experiment_id = s.column_int(0);
  s.run();  // finish the RETURNING statement
  write_event(sqlite::unix_now(), "trial.provisional",
              trial_events::provisional(experiment_id, trial_id, attempt, provisional));
  tx.commit();
  return true;
}

bool SqliteResultStore::merge_provenance(std::int64_t trial_id, int attempt,
                                         const nlohmann::json& patch) {
  check_id(trial_id, "trial_id");
  check_attempt(attempt, 1);
  sqlite::WriteTransaction tx(*db_);
  auto s = db_->prepare("SELECT provenance FROM trials WHERE id = ?1 AND attempt = ?2");
  s.bind_int(1, trial_id).bind_int(2, attempt);
  if (!s.step()) {
    require_trial(trial_id);
    return false;
  }
  nlohmann::json p = nlohmann::json::parse(s.column_text(0), nullptr, false);
  s.run();  // finish the SELECT
  if (!p.is_object()) p = nlohmann::json::object();
  p.merge_patch(patch);
  auto u = db_->prepare("UPDATE trials SET provenance = ?3 WHERE id = ?1 AND attempt = ?2");
  u.bind_int(1, trial_id).bind_int(2, attempt).bind_text(3, p.dump());
  u.run();
  tx.commit();
  return true;
}

std::int64_t SqliteResultStore::forget_gone_workers(WorkerKind kind, double last_seen_before) {
  auto s = db_->prepare("DELETE FROM workers WHERE kind = ?1 AND gone = 1 AND last_seen < ?2");
  s.bind_text(1, to_string(kind)).bind_double(2, last_seen_before);
  s.run();
  return db_->changes();
}

// ---- events ----

std::int64_t SqliteResultStore::append_event(std::string_view type, const nlohmann::json& data) {
  check_not_empty(type, "event type");
  return write_event(sqlite::unix_now(), type, data);
}

}  // namespace dnnlab::store
