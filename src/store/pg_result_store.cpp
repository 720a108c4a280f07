// PgResultStore: the embedded store's tables and rules in PostgreSQL: the
// writes (the schema and the connection in pg_result_schema.cpp, reads in
// pg_result_reads.cpp, batches in pg_result_batch.cpp). Each method is the
// SQLite backend's statement in PostgreSQL's dialect ($n parameters, ON CONFLICT, RETURNING);
// the events, worker updates and counts that a trial's change produces come
// from trial_events.hpp, as there.
#include "store/pg_result_store.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <thread>

#include "store/sha256.hpp"
#include "store/store_checks.hpp"
#include "store/trial_events.hpp"

namespace dnnlab::store {
namespace {

using namespace checks;  // NOLINT(google-build-using-namespace): the shared argument checks

double finite_or_zero(double v) {
  return std::isfinite(v) ? v : 0.0;
}

}  // namespace

void PgResultStore::require_experiment(std::int64_t experiment_id) {
  check_id(experiment_id, "experiment_id");
  pg::Params p;
  p.add(experiment_id);
  if (db_->query("SELECT 1 FROM experiments WHERE id = $1", p).rows() == 0)
    throw std::invalid_argument("experiment_id " + std::to_string(experiment_id) +
                                " does not exist");
}

void PgResultStore::require_trial(std::int64_t trial_id) {
  check_id(trial_id, "trial_id");
  pg::Params p;
  p.add(trial_id);
  if (db_->query("SELECT 1 FROM trials WHERE id = $1", p).rows() == 0)
    throw std::invalid_argument("trial_id " + std::to_string(trial_id) + " does not exist");
}

// Inside the caller's transaction: a row in the inbox, no id yet (the
// sequencer gives it one once it committed), so writers never wait on each
// other (trial_events.hpp).
void PgResultStore::write_event(double time, std::string_view type, const nlohmann::json& data) {
  pg::Params p;
  p.add(time).add(type).add(data.dump());
  db_->query("INSERT INTO event_inbox (time, type, data) VALUES ($1, $2, $3)", p);
}

// Inside the caller's transaction, which holds the sequencer's lock until it
// ends: every committed inbox row becomes an event, numbered after the last
// id given (a transaction's events together, transactions by xid). Rows of
// transactions still open are not visible here; they are numbered by a later
// call, above every id given now, so a reader that saw id N never finds a
// new event below N. Writes nothing (no commit to flush) when the inbox is empty.
void PgResultStore::sequence_events() {
  db_->query("SELECT pg_advisory_xact_lock(727275)");  // 727274: pg::migrate
  db_->query(
      "WITH moved AS (DELETE FROM event_inbox RETURNING tmp, xid, time, type, data), "
      "next AS (UPDATE event_cursor SET last = last + (SELECT count(*) FROM moved) "
      "WHERE EXISTS (SELECT 1 FROM moved) RETURNING last - (SELECT count(*) FROM moved) AS base) "
      "INSERT INTO events (id, time, type, data) "
      "SELECT next.base + row_number() OVER (ORDER BY m.xid, m.tmp), m.time, m.type, m.data "
      "FROM moved m, next");
}

// Inside the caller's transaction, the trial's row locked and decide_start
// allowing it: the trial, the worker's current trial, the counts and the
// event in one statement (one round trip): a start costs BEGIN, the locking
// SELECT, this, COMMIT; in a batch, this alone.
void PgResultStore::start_locked(std::int64_t trial_id, int attempt, std::string_view worker_id,
                                 const nlohmann::json& provenance, bool is_start,
                                 std::int64_t experiment_id, std::int64_t index,
                                 const std::string& status) {
  const double now = unix_now();
  const bool moved = status != "running";
  pg::Params p;
  p.add(trial_id).add(attempt).add(worker_id).add(now).add(provenance.dump());
  p.add(is_start);
  p.add_array(moved ? std::vector<std::int64_t>{experiment_id, experiment_id}
                    : std::vector<std::int64_t>{});
  p.add_array(moved ? std::vector<std::string>{status, "running"} : std::vector<std::string>{});
  p.add_array(moved ? std::vector<std::int64_t>{-1, 1} : std::vector<std::int64_t>{});
  p.add(trial_events::started(experiment_id, trial_id, index, worker_id, attempt).dump());
  db_->query(
      "WITH t AS (UPDATE trials SET status = 'running', attempt = $2, worker = $3, "
      "started_at = $4, finished_at = NULL, train_loss = NULL, train_acc = NULL, "
      "val_loss = NULL, val_acc = NULL, test_acc = NULL, epochs_done = 0, seconds = 0, "
      "error = '', provenance = $5, provisional = false WHERE id = $1), "
      "w AS (UPDATE workers SET current_trial = $1, last_seen = $4 WHERE id = $3 AND $6), "
      "c AS (INSERT INTO trial_count_deltas (experiment_id, status, n) "
      "SELECT * FROM unnest($7::bigint[], $8::text[], $9::bigint[])) "
      "INSERT INTO event_inbox (time, type, data) SELECT $4, 'trial.started', $10 WHERE $6",
      p);
}

void PgResultStore::count(std::int64_t experiment_id, std::string_view status, std::int64_t n) {
  pg::Params p;
  p.add(experiment_id).add(status).add(n);
  db_->query("INSERT INTO trial_count_deltas (experiment_id, status, n) VALUES ($1, $2, $3)", p);
}

void PgResultStore::recount(std::int64_t experiment_id) {
  pg::Params p;
  p.add(experiment_id);
  db_->query("DELETE FROM trial_counts WHERE experiment_id = $1", p);
  db_->query("DELETE FROM trial_count_deltas WHERE experiment_id = $1", p);
  db_->query(
      "INSERT INTO trial_counts (experiment_id, status, n) SELECT experiment_id, status, "
      "count(*) FROM trials WHERE experiment_id = $1 GROUP BY experiment_id, status",
      p);
}

// ---- experiments ----

std::int64_t PgResultStore::create_experiment(const ExperimentRecord& e) {
  return retrying(Retry::unless_commit_unknown, [&]() -> std::int64_t {
    check_not_empty(e.name, "name");
    pg::Params p;
    p.add(e.name).add(e.spec_text).add(spec_hash(e.spec_text)).add(e.spec_path).add(e.method);
    p.add(e.created_at > 0 ? e.created_at : unix_now()).add(to_string(e.status));
    p.add(e.provenance.dump());
    return db_
        ->query(
            "INSERT INTO experiments (name, spec_text, spec_hash, spec_path, method, created_at, "
            "status, provenance) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING id",
            p)
        .integer(0, 0);
  });
}

void PgResultStore::set_status(std::int64_t experiment_id, ExperimentStatus status) {
  return retrying(Retry::always, [&]() -> void {
    check_id(experiment_id, "experiment_id");
    pg::Params p;
    p.add(experiment_id).add(to_string(status));
    if (db_->query("UPDATE experiments SET status = $2 WHERE id = $1", p).affected() == 0)
      require_experiment(experiment_id);
  });
}

bool PgResultStore::acquire_coordinator(std::int64_t experiment_id, std::string_view holder,
                                        double seconds) {
  return retrying(Retry::always, [&]() -> bool {
    check_not_empty(holder, "holder");
    if (!(seconds > 0 && seconds <= 86400))
      throw std::invalid_argument("seconds must be in (0, 86400], got " + std::to_string(seconds));
    require_experiment(experiment_id);
    const double now = unix_now();
    pg::Params p;
    p.add(experiment_id).add(holder).add(now + seconds).add(now);
    return db_->query(
                  "INSERT INTO coordinator_leases AS l (experiment_id, holder, deadline) "
                  "VALUES ($1, $2, $3) ON CONFLICT (experiment_id) DO UPDATE SET "
                  "holder = excluded.holder, deadline = excluded.deadline "
                  "WHERE l.holder = excluded.holder OR l.deadline < $4",
                  p)
               .affected() == 1;
  });
}

void PgResultStore::release_coordinator(std::int64_t experiment_id, std::string_view holder) {
  return retrying(Retry::always, [&]() -> void {
    check_id(experiment_id, "experiment_id");
    pg::Params p;
    p.add(experiment_id).add(holder);
    db_->query("DELETE FROM coordinator_leases WHERE experiment_id = $1 AND holder = $2", p);
  });
}

void PgResultStore::set_published(std::int64_t experiment_id, std::int64_t index) {
  return retrying(Retry::always, [&]() -> void {
    check_id(experiment_id, "experiment_id");
    pg::Params p;
    p.add(experiment_id).add(index);
    if (db_->query("UPDATE experiments SET published_index = greatest(published_index, $2) "
                   "WHERE id = $1",
                   p)
            .affected() == 0)
      require_experiment(experiment_id);
  });
}

// ---- trials ----

std::vector<std::int64_t> PgResultStore::add_trials(std::int64_t experiment_id,
                                                    const std::vector<NewTrial>& trials) {
  return retrying(Retry::unless_commit_unknown, [&]() -> std::vector<std::int64_t> {
    for (std::size_t i = 0; i < trials.size(); ++i)
      if (!nlohmann::json::accept(trials[i].config_json))
        throw std::invalid_argument("trials[" + std::to_string(i) +
                                    "].config_json is not valid JSON");
    std::vector<std::int64_t> ids;
    ids.reserve(trials.size());
    pg::Transaction tx(*db_);
    require_experiment(experiment_id);
    for (std::size_t i = 0; i < trials.size(); ++i) {
      const NewTrial& t = trials[i];
      pg::Params p;
      p.add(experiment_id).add(t.index).add(t.config_json).add(static_cast<std::int64_t>(t.seed));
      try {
        ids.push_back(db_->query("INSERT INTO trials (experiment_id, idx, config, seed, status) "
                                 "VALUES ($1, $2, $3, $4, 'queued') RETURNING id",
                                 p)
                          .integer(0, 0));
      } catch (const pg::Error& e) {
        if (e.sqlstate() != "23505") throw;  // unique_violation
        throw std::invalid_argument("trials[" + std::to_string(i) + "].index " +
                                    std::to_string(t.index) + " already exists in experiment " +
                                    std::to_string(experiment_id));
      }
    }
    if (!trials.empty()) count(experiment_id, "queued", static_cast<std::int64_t>(trials.size()));
    tx.commit();
    return ids;
  });
}

bool PgResultStore::mark_running(std::int64_t trial_id, int attempt, std::string_view worker_id,
                                 const nlohmann::json& provenance) {
  return retrying(Retry::always, [&]() -> bool {
    check_id(trial_id, "trial_id");
    check_attempt(attempt, 1);
    check_not_empty(worker_id, "worker_id");
    pg::Transaction tx(*db_);
    pg::Params key;
    key.add(trial_id);
    // FOR UPDATE: two workers deciding on one trial take turns.
    pg::Result q = db_->query(
        "SELECT experiment_id, idx, status, attempt, worker FROM trials WHERE id = $1 FOR UPDATE",
        key);
    if (q.rows() == 0)
      throw std::invalid_argument("trial_id " + std::to_string(trial_id) + " does not exist");
    const std::int64_t experiment_id = q.integer(0, 0), index = q.integer(0, 1);
    const std::string status = q.text(0, 2);
    const auto d = trial_events::decide_start(status, static_cast<int>(q.integer(0, 3)),
                                              q.text(0, 4), attempt, worker_id);
    if (!d.allowed) return false;
    start_locked(trial_id, attempt, worker_id, provenance, d.is_start, experiment_id, index,
                 status);
    tx.commit();
    return true;
  });
}

bool PgResultStore::record_epoch(std::int64_t trial_id, int attempt, const EpochMetrics& m) {
  return retrying(Retry::always, [&]() -> bool {
    check_id(trial_id, "trial_id");
    check_attempt(attempt, 1);
    if (m.epoch < 0)
      throw std::invalid_argument("epoch must not be negative, got " + std::to_string(m.epoch));
    pg::Transaction tx(*db_);
    pg::Params key;
    key.add(trial_id).add(attempt);
    pg::Result q = db_->query(
        "SELECT experiment_id FROM trials WHERE id = $1 AND attempt = $2 AND status = 'running' "
        "FOR SHARE",
        key);
    if (q.rows() == 0) {
      require_trial(trial_id);
      return false;
    }
    const std::int64_t experiment_id = q.integer(0, 0);
    pg::Params p;
    p.add(trial_id).add(attempt).add(m.epoch).add(m.train_loss).add(m.train_acc);
    p.add(m.val_loss).add(m.val_acc).add(finite_or_zero(m.seconds)).add(m.lr);
    db_->query(
        "INSERT INTO epochs (trial_id, attempt, epoch, train_loss, train_acc, val_loss, val_acc, "
        "seconds, lr) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) "
        "ON CONFLICT (trial_id, attempt, epoch) DO UPDATE SET train_loss = excluded.train_loss, "
        "train_acc = excluded.train_acc, val_loss = excluded.val_loss, val_acc = excluded.val_acc, "
        "seconds = excluded.seconds, lr = excluded.lr",
        p);
    write_event(unix_now(), "trial.epoch",
                trial_events::epoch(experiment_id, trial_id, m.epoch, m.val_acc, m.train_loss));
    tx.commit();
    return true;
  });
}

bool PgResultStore::finish_trial(std::int64_t trial_id, int attempt, TrialStatus status,
                                 const TrialMetrics& m, std::string_view error) {
  return retrying(Retry::always, [&]() -> bool {
    check_id(trial_id, "trial_id");
    check_attempt(attempt, 0);
    if (!is_terminal(status))
      throw std::invalid_argument("status must be finished, pruned, failed or cancelled, got " +
                                  std::string(to_string(status)));
    pg::Transaction tx(*db_);
    pg::Params key;
    key.add(trial_id).add(attempt);
    pg::Result q = db_->query(
        "SELECT experiment_id, idx, status FROM trials WHERE id = $1 AND attempt = $2 "
        "AND status IN ('queued', 'running') FOR UPDATE",
        key);
    if (q.rows() == 0) {
      require_trial(trial_id);
      return false;
    }
    const std::int64_t experiment_id = q.integer(0, 0), index = q.integer(0, 1);
    const std::string old_status = q.text(0, 2);
    const double now = unix_now();
    pg::Params p;
    p.add(trial_id).add(attempt).add(to_string(status)).add(now).add(m.train_loss);
    p.add(m.train_acc).add(m.val_loss).add(m.val_acc).add(m.test_acc).add(m.epochs_done);
    p.add(finite_or_zero(m.seconds)).add(error);
    db_->query(
        "UPDATE trials SET status = $3, finished_at = $4, train_loss = $5, train_acc = $6, "
        "val_loss = $7, val_acc = $8, test_acc = $9, epochs_done = $10, seconds = $11, "
        "error = $12 WHERE id = $1 AND attempt = $2",
        p);
    if (status != TrialStatus::cancelled)
      write_event(
          now, "trial." + std::string(to_string(status)),
          trial_events::ended(experiment_id, trial_id, index, m.val_acc, m.epochs_done, error));
    count(experiment_id, old_status, -1);
    count(experiment_id, to_string(status), 1);
    tx.commit();
    return true;
  });
}

bool PgResultStore::release_trial(std::int64_t trial_id, int attempt) {
  return retrying(Retry::always, [&]() -> bool {
    check_id(trial_id, "trial_id");
    check_attempt(attempt, 1);
    pg::Transaction tx(*db_);
    pg::Params p;
    p.add(trial_id).add(attempt);
    pg::Result r = db_->query(
        "UPDATE trials SET status = 'queued', worker = '', started_at = NULL "
        "WHERE id = $1 AND attempt = $2 AND status = 'running' RETURNING experiment_id",
        p);
    if (r.rows() == 0) {
      require_trial(trial_id);
      return false;
    }
    count(r.integer(0, 0), "running", -1);
    count(r.integer(0, 0), "queued", 1);
    tx.commit();
    return true;
  });
}

std::optional<int> PgResultStore::reopen_trial(std::int64_t trial_id) {
  return retrying(Retry::unless_commit_unknown, [&]() -> std::optional<int> {
    check_id(trial_id, "trial_id");
    pg::Transaction tx(*db_);
    pg::Params key;
    key.add(trial_id);
    pg::Result q = db_->query("SELECT status FROM trials WHERE id = $1 FOR UPDATE", key);
    if (q.rows() == 0)
      throw std::invalid_argument("trial_id " + std::to_string(trial_id) + " does not exist");
    const std::string old_status = q.text(0, 0);
    pg::Result r = db_->query(
        "UPDATE trials SET status = 'queued', worker = '', started_at = NULL, "
        "finished_at = NULL, train_loss = NULL, train_acc = NULL, val_loss = NULL, "
        "val_acc = NULL, test_acc = NULL, epochs_done = 0, seconds = 0, error = '' "
        "WHERE id = $1 AND status IN ('finished', 'pruned', 'failed') "
        "RETURNING experiment_id, attempt",
        key);
    if (r.rows() == 0) return std::nullopt;
    const std::int64_t experiment_id = r.integer(0, 0);
    const int attempt = static_cast<int>(r.integer(0, 1));
    write_event(unix_now(), "trial.reopened",
                {{"trial", trial_id}, {"experiment", experiment_id}, {"attempt", attempt}});
    count(experiment_id, old_status, -1);
    count(experiment_id, "queued", 1);
    tx.commit();
    return attempt;
  });
}

std::int64_t PgResultStore::cancel_trials(std::int64_t experiment_id) {
  return retrying(Retry::always, [&]() -> std::int64_t {
    pg::Transaction tx(*db_);
    require_experiment(experiment_id);
    const double now = unix_now();
    pg::Params key;
    key.add(experiment_id);
    // The running trials, with their current attempt's stored epochs, each
    // logged as trial.cancelled (queued ones end with experiment.cancelled).
    pg::Result running = db_->query(
        "SELECT t.id, t.idx, t.worker, t.attempt, (SELECT count(*) FROM epochs e "
        "WHERE e.trial_id = t.id AND e.attempt = t.attempt) FROM trials t "
        "WHERE t.experiment_id = $1 AND t.status = 'running' ORDER BY t.id FOR UPDATE",
        key);
    for (int i = 0; i < running.rows(); ++i)
      write_event(
          now, "trial.cancelled",
          trial_events::cancelled(experiment_id, running.integer(i, 0), running.integer(i, 1),
                                  running.text(i, 2), static_cast<int>(running.integer(i, 3)),
                                  running.integer(i, 4)));
    pg::Params p;
    p.add(experiment_id).add(now);
    const std::int64_t n =
        db_->query(
               "UPDATE trials AS t SET status = 'cancelled', finished_at = $2, epochs_done = "
               "(SELECT count(*) FROM epochs e WHERE e.trial_id = t.id AND e.attempt = t.attempt) "
               "WHERE t.experiment_id = $1 AND t.status IN ('queued', 'running')",
               p)
            .affected();
    if (n > 0) recount(experiment_id);
    tx.commit();
    return n;
  });
}

bool PgResultStore::set_provisional(std::int64_t trial_id, int attempt, bool provisional) {
  return retrying(Retry::always, [&]() -> bool {
    check_id(trial_id, "trial_id");
    check_attempt(attempt, 1);
    pg::Params p;
    p.add(trial_id).add(attempt).add(provisional);
    pg::Transaction tx(*db_);
    pg::Result r = db_->query(
        "UPDATE trials SET provisional = $3 WHERE id = $1 AND attempt = $2 RETURNING experiment_id",
        p);
    if (r.rows() != 1) {
      require_trial(trial_id);
      return false;
    }
    write_event(unix_now(), "trial.provisional",
                trial_events::provisional(r.integer(0, 0), trial_id, attempt, provisional));
    tx.commit();
    return true;
  });
}

bool PgResultStore::merge_provenance(std::int64_t trial_id, int attempt,
                                     const nlohmann::json& patch) {
  return retrying(Retry::always, [&]() -> bool {
    check_id(trial_id, "trial_id");
    check_attempt(attempt, 1);
    pg::Params p;
    p.add(trial_id).add(attempt);
    pg::Transaction tx(*db_);
    pg::Result r =
        db_->query("SELECT provenance FROM trials WHERE id = $1 AND attempt = $2 FOR UPDATE", p);
    if (r.rows() != 1) {
      require_trial(trial_id);
      return false;
    }
    nlohmann::json prov = nlohmann::json::parse(r.text(0, 0), nullptr, false);
    if (!prov.is_object()) prov = nlohmann::json::object();
    prov.merge_patch(patch);
    pg::Params u;
    u.add(trial_id).add(attempt).add(prov.dump());
    db_->query("UPDATE trials SET provenance = $3 WHERE id = $1 AND attempt = $2", u);
    tx.commit();
    return true;
  });
}

// ---- workers ----

void PgResultStore::upsert_worker(const WorkerRecord& w) {
  return retrying(Retry::always, [&]() -> void {
    check_not_empty(w.id, "worker id");
    const double now = unix_now();
    pg::Params p;
    p.add(w.id).add(to_string(w.kind)).add(w.host).add(w.pid);
    p.add(w.started_at > 0 ? w.started_at : now).add(now);
    db_->query(
        "INSERT INTO workers (id, kind, host, pid, started_at, last_seen, current_trial, gone) "
        "VALUES ($1, $2, $3, $4, $5, $6, NULL, false) ON CONFLICT (id) DO UPDATE SET "
        "kind = excluded.kind, host = excluded.host, pid = excluded.pid, "
        "started_at = excluded.started_at, last_seen = excluded.last_seen, current_trial = NULL, "
        "gone = false",
        p);
  });
}

void PgResultStore::heartbeat(std::string_view worker_id,
                              std::optional<std::int64_t> current_trial) {
  return retrying(Retry::always, [&]() -> void {
    check_not_empty(worker_id, "worker_id");
    pg::Params p;
    p.add(worker_id).add(unix_now());
    if (current_trial)
      p.add(*current_trial);
    else
      p.null();
    if (db_->query("UPDATE workers SET last_seen = $2, current_trial = $3, gone = false "
                   "WHERE id = $1",
                   p)
            .affected() == 0)
      throw std::invalid_argument("worker_id '" + std::string(worker_id) +
                                  "' is not registered (upsert_worker first)");
  });
}

void PgResultStore::mark_worker_gone(std::string_view worker_id) {
  return retrying(Retry::always, [&]() -> void {
    check_not_empty(worker_id, "worker_id");
    pg::Params p;
    p.add(worker_id);
    if (db_->query("UPDATE workers SET gone = true, current_trial = NULL WHERE id = $1", p)
            .affected() == 0)
      throw std::invalid_argument("worker_id '" + std::string(worker_id) + "' is not registered");
  });
}

std::int64_t PgResultStore::forget_gone_workers(WorkerKind kind, double last_seen_before) {
  return retrying(Retry::always, [&]() -> std::int64_t {
    pg::Params p;
    p.add(to_string(kind)).add(last_seen_before);
    return db_->query("DELETE FROM workers WHERE kind = $1 AND gone AND last_seen < $2", p)
        .affected();
  });
}

// ---- events ----

std::int64_t PgResultStore::append_event(std::string_view type, const nlohmann::json& data) {
  return retrying(Retry::unless_commit_unknown, [&]() -> std::int64_t {
    check_not_empty(type, "event type");
    // Its id now (callers get it back): numbered by the sequencer itself,
    // whose lock, held to COMMIT, keeps the next numbering after this one.
    pg::Transaction tx(*db_);
    sequence_events();
    pg::Params p;
    p.add(unix_now()).add(type).add(data.dump());
    const std::int64_t id =
        db_->query(
               "WITH next AS (UPDATE event_cursor SET last = last + 1 RETURNING last) "
               "INSERT INTO events (id, time, type, data) SELECT last, $1, $2, $3 FROM next "
               "RETURNING id",
               p)
            .integer(0, 0);
    tx.commit();
    return id;
  });
}

}  // namespace dnnlab::store
