// SqliteResultStore's reads: experiments, the trial table and curves, counts,
// workers and events, as the dashboard, the REST API and the coordinator ask
// for them.
#include <string>
#include <vector>

#include "store/sqlite_result_store.hpp"
#include "store/store_checks.hpp"

namespace dnnlab::store {
namespace {

using namespace checks;  // NOLINT(google-build-using-namespace): the shared argument checks

ExperimentRecord read_experiment(const sqlite::Statement& s) {
  ExperimentRecord e;
  e.id = s.column_int(0);
  e.name = s.column_text(1);
  e.spec_text = s.column_text(2);
  e.spec_hash = s.column_text(3);
  e.spec_path = s.column_text(4);
  e.method = s.column_text(5);
  e.created_at = s.column_double(6);
  e.status = parse_experiment_status(s.column_text(7));
  e.provenance = parse_stored_json(s.column_text(8));
  e.published_index = s.column_int(9);
  return e;
}

TrialRecord read_trial(const sqlite::Statement& s) {
  TrialRecord t;
  t.id = s.column_int(0);
  t.experiment_id = s.column_int(1);
  t.index = s.column_int(2);
  t.config_json = s.column_text(3);
  t.seed = static_cast<std::uint64_t>(s.column_int(4));
  t.status = parse_trial_status(s.column_text(5));
  t.attempt = static_cast<int>(s.column_int(6));
  t.worker = s.column_text(7);
  t.started_at = s.column_opt_double(8);
  t.finished_at = s.column_opt_double(9);
  t.metrics.train_loss = s.column_opt_double(10);
  t.metrics.train_acc = s.column_opt_double(11);
  t.metrics.val_loss = s.column_opt_double(12);
  t.metrics.val_acc = s.column_opt_double(13);
  t.metrics.test_acc = s.column_opt_double(14);
  t.metrics.epochs_done = s.column_int(15);
  t.metrics.seconds = s.column_double(16);
  t.error = s.column_text(17);
  t.provenance = parse_stored_json(s.column_text(18));
  t.provisional = s.column_int(19) != 0;
  t.pinned = s.column_int(20) != 0;
  return t;
}

// Columns: epoch, train_loss, train_acc, val_loss, val_acc, seconds, lr from `first`.
EpochMetrics read_epoch(const sqlite::Statement& s, int first) {
  EpochMetrics m;
  m.epoch = s.column_int(first);
  m.train_loss = s.column_opt_double(first + 1);
  m.train_acc = s.column_opt_double(first + 2);
  m.val_loss = s.column_opt_double(first + 3);
  m.val_acc = s.column_opt_double(first + 4);
  m.seconds = s.column_double(first + 5);
  m.lr = s.column_opt_double(first + 6);
  return m;
}

WorkerRecord read_worker(const sqlite::Statement& s) {
  WorkerRecord w;
  w.id = s.column_text(0);
  w.kind = parse_worker_kind(s.column_text(1));
  w.host = s.column_text(2);
  w.pid = s.column_int(3);
  w.started_at = s.column_double(4);
  w.last_seen = s.column_double(5);
  w.current_trial = s.column_opt_int(6);
  w.gone = s.column_int(7) != 0;
  return w;
}

EventRecord read_event(const sqlite::Statement& s) {
  return {s.column_int(0), s.column_double(1), s.column_text(2),
          parse_stored_json(s.column_text(3))};
}

}  // namespace

// ---- experiments ----

std::optional<ExperimentRecord> SqliteResultStore::experiment(std::int64_t id) {
  check_id(id, "experiment_id");
  auto s =
      db_->prepare("SELECT " + std::string(kExperimentColumns) + " FROM experiments WHERE id = ?1");
  s.bind_int(1, id);
  if (!s.step()) return std::nullopt;
  return read_experiment(s);
}

std::vector<ExperimentRecord> SqliteResultStore::experiments() {
  auto s = db_->prepare("SELECT " + std::string(kExperimentColumns) +
                        " FROM experiments ORDER BY id DESC");
  std::vector<ExperimentRecord> out;
  while (s.step()) out.push_back(read_experiment(s));
  return out;
}

std::optional<ExperimentRecord> SqliteResultStore::find_experiment(std::string_view name,
                                                                   std::string_view hash) {
  auto s = db_->prepare("SELECT " + std::string(kExperimentColumns) +
                        " FROM experiments WHERE name = ?1 AND spec_hash = ?2 "
                        "ORDER BY id DESC LIMIT 1");
  s.bind_text(1, name).bind_text(2, hash);
  if (!s.step()) return std::nullopt;
  return read_experiment(s);
}

std::optional<std::string> SqliteResultStore::coordinator(std::int64_t experiment_id) {
  check_id(experiment_id, "experiment_id");
  auto s = db_->prepare(
      "SELECT holder FROM coordinator_leases WHERE experiment_id = ?1 AND deadline >= ?2");
  s.bind_int(1, experiment_id).bind_double(2, sqlite::unix_now());
  if (!s.step()) return std::nullopt;
  return s.column_text(0);
}

// ---- trials ----

std::vector<TrialRecord> SqliteResultStore::trials(std::int64_t experiment_id,
                                                   const TrialQuery& q) {
  check_id(experiment_id, "experiment_id");
  const std::string order = check_trial_query(q, [](std::string_view name) {
    return "json_extract(config, '$." + std::string(name) + "')";
  });
  std::string sql = "SELECT " + std::string(kTrialColumns) +
                    " FROM trials WHERE experiment_id = ?1" +
                    (q.status ? " AND status = ?2" : " AND ?2 IS NULL") +
                    (q.worker ? " AND worker = ?5 " : " AND ?5 IS NULL ") + "ORDER BY " + order +
                    " LIMIT ?3 OFFSET ?4";
  auto s = db_->prepare(sql);
  s.bind_int(1, experiment_id);
  if (q.status)
    s.bind_text(2, to_string(*q.status));
  else
    s.bind_null(2);
  if (q.worker)
    s.bind_text(5, *q.worker);
  else
    s.bind_null(5);
  s.bind_int(3, q.limit == 0 ? -1 : q.limit).bind_int(4, q.offset);
  std::vector<TrialRecord> out;
  while (s.step()) out.push_back(read_trial(s));
  return out;
}

std::optional<TrialRecord> SqliteResultStore::trial(std::int64_t trial_id) {
  check_id(trial_id, "trial_id");
  std::optional<TrialRecord> t;
  {
    auto s = db_->prepare("SELECT " + std::string(kTrialColumns) + " FROM trials WHERE id = ?1");
    s.bind_int(1, trial_id);
    if (!s.step()) return std::nullopt;
    t = read_trial(s);
  }
  auto c = db_->prepare(
      "SELECT epoch, train_loss, train_acc, val_loss, val_acc, seconds, lr FROM epochs "
      "WHERE trial_id = ?1 AND attempt = ?2 ORDER BY epoch");
  c.bind_int(1, trial_id).bind_int(2, t->attempt);
  while (c.step()) t->curve.push_back(read_epoch(c, 0));
  return t;
}

TrialCounts SqliteResultStore::trial_counts(std::int64_t experiment_id) {
  check_id(experiment_id, "experiment_id");
  auto s = db_->prepare("SELECT status, n FROM trial_counts WHERE experiment_id = ?1");
  s.bind_int(1, experiment_id);
  TrialCounts c;
  while (s.step()) {
    std::int64_t n = s.column_int(1);
    c.of(parse_trial_status(s.column_text(0))) = n;
  }
  return c;
}

std::optional<TrialRecord> SqliteResultStore::best_trial(std::int64_t experiment_id,
                                                         std::string_view metric, bool maximize) {
  check_id(experiment_id, "experiment_id");
  const std::string_view column = sort_column(metric, "metric");
  auto s = db_->prepare(
      "SELECT " + std::string(kTrialColumns) +
      " FROM trials WHERE experiment_id = ?1 AND status = 'finished' AND provisional = 0 AND " +
      std::string(column) + " IS NOT NULL ORDER BY " + std::string(column) +
      (maximize ? " DESC" : " ASC") + ", idx LIMIT 1");
  s.bind_int(1, experiment_id);
  if (!s.step()) return std::nullopt;
  return read_trial(s);
}

std::vector<TrialEpoch> SqliteResultStore::epochs_for(std::int64_t experiment_id,
                                                      std::int64_t epoch) {
  check_id(experiment_id, "experiment_id");
  auto s = db_->prepare(
      "SELECT t.id, t.idx, e.epoch, e.train_loss, e.train_acc, e.val_loss, e.val_acc, "
      "e.seconds, e.lr FROM trials t JOIN epochs e "
      "ON e.trial_id = t.id AND e.attempt = t.attempt AND e.epoch = ?2 "
      "WHERE t.experiment_id = ?1 AND t.provisional = 0 ORDER BY t.idx");
  s.bind_int(1, experiment_id).bind_int(2, epoch);
  std::vector<TrialEpoch> out;
  while (s.step()) out.push_back({s.column_int(0), s.column_int(1), read_epoch(s, 2)});
  return out;
}

CurveChanges SqliteResultStore::curves_since(std::int64_t experiment_id, std::int64_t after_id,
                                             std::int64_t limit) {
  check_id(experiment_id, "experiment_id");
  check_curve_cursor(after_id, limit);
  // The cursor first, the trials second: a change committed between the two
  // is read now and again after its event, which is harmless.
  CurveChanges out;
  std::int64_t read = 0;
  {
    auto c = db_->prepare(after_id == 0 ? "SELECT coalesce(max(id), 0), 0 FROM events"
                                        : "SELECT coalesce(max(id), ?1), count(*) FROM "
                                          "(SELECT id FROM events WHERE id > ?1 ORDER BY id "
                                          "LIMIT ?2)");
    if (after_id != 0) c.bind_int(1, after_id).bind_int(2, limit);
    c.step();
    out.cursor = c.column_int(0);
    read = c.column_int(1);
  }
  out.more = read == limit;
  if (after_id != 0 && read == 0) return out;
  // Each touched trial once, found by its id (CROSS JOIN keeps the events
  // outside: the experiment's other trials are never scanned), its current
  // attempt's epochs beside it.
  constexpr std::string_view kColumns =
      "SELECT t.id, t.idx, t.attempt, t.provisional, e.epoch, e.train_loss, e.train_acc, "
      "e.val_loss, e.val_acc, e.seconds, e.lr FROM ";
  constexpr std::string_view kEpochs =
      " LEFT JOIN epochs e ON e.trial_id = t.id AND e.attempt = t.attempt "
      "WHERE t.experiment_id = ?1";
  auto s = db_->prepare(
      std::string(kColumns) +
      (after_id == 0
           ? "trials t" + std::string(kEpochs) + " AND t.attempt > 0"
           : "(SELECT DISTINCT json_extract(data, '$.trial') AS tid FROM events WHERE id > ?2 "
             "AND id <= ?3 AND type IN ('trial.epoch', 'trial.started', 'trial.provisional') "
             "AND json_extract(data, '$.experiment') = ?1) AS ev CROSS JOIN trials t "
             "ON t.id = ev.tid" +
                 std::string(kEpochs)) +
      " ORDER BY t.id, e.epoch");
  s.bind_int(1, experiment_id);
  if (after_id != 0) s.bind_int(2, after_id).bind_int(3, out.cursor);
  while (s.step()) {
    if (out.trials.empty() || out.trials.back().trial_id != s.column_int(0))
      out.trials.push_back({s.column_int(0),
                            s.column_int(1),
                            static_cast<int>(s.column_int(2)),
                            s.column_int(3) != 0,
                            {}});
    if (s.column_opt_int(4)) out.trials.back().curve.push_back(read_epoch(s, 4));
  }
  return out;
}

// ---- workers ----

std::vector<WorkerRecord> SqliteResultStore::workers() {
  auto s = db_->prepare(
      "SELECT id, kind, host, pid, started_at, last_seen, current_trial, gone FROM workers "
      "ORDER BY started_at, id");
  std::vector<WorkerRecord> out;
  while (s.step()) out.push_back(read_worker(s));
  return out;
}

// ---- events ----

std::vector<EventRecord> SqliteResultStore::events_since(std::int64_t after_id,
                                                         std::int64_t limit) {
  if (after_id < 0)
    throw std::invalid_argument("after_id must not be negative, got " + std::to_string(after_id));
  if (limit < 1 || limit > 10000)
    throw std::invalid_argument("limit must be in 1..10000, got " + std::to_string(limit));
  auto s =
      db_->prepare("SELECT id, time, type, data FROM events WHERE id > ?1 ORDER BY id LIMIT ?2");
  s.bind_int(1, after_id).bind_int(2, limit);
  std::vector<EventRecord> out;
  while (s.step()) out.push_back(read_event(s));
  return out;
}

std::vector<EventRecord> SqliteResultStore::events_of_type(std::string_view type) {
  // A scan of the table (no index on type): called once when a service starts.
  auto s = db_->prepare("SELECT id, time, type, data FROM events WHERE type = ?1 ORDER BY id");
  s.bind_text(1, type);
  std::vector<EventRecord> out;
  while (s.step()) out.push_back(read_event(s));
  return out;
}

}  // namespace dnnlab::store
