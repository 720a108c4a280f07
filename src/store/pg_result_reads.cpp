// PgResultStore's reads: experiments, the trial table and curves, counts,
// workers and events, as the dashboard, the REST API and the coordinator ask
// for them. Three write first: trial_counts folds the writers' count deltas,
// events_since and events_of_type run the sequencer (trial_events.hpp).
#include <string>
#include <vector>

#include "store/pg_result_store.hpp"
#include "store/store_checks.hpp"

namespace dnnlab::store {
namespace {

using namespace checks;  // NOLINT(google-build-using-namespace): the shared argument checks

ExperimentRecord read_experiment(const pg::Result& r, int row) {
  ExperimentRecord e;
  e.id = r.integer(row, 0);
  e.name = r.text(row, 1);
  e.spec_text = r.text(row, 2);
  e.spec_hash = r.text(row, 3);
  e.spec_path = r.text(row, 4);
  e.method = r.text(row, 5);
  e.created_at = r.real(row, 6);
  e.status = parse_experiment_status(r.text(row, 7));
  e.provenance = parse_stored_json(r.text(row, 8));
  e.published_index = r.integer(row, 9);
  return e;
}

TrialRecord read_trial(const pg::Result& r, int row) {
  TrialRecord t;
  t.id = r.integer(row, 0);
  t.experiment_id = r.integer(row, 1);
  t.index = r.integer(row, 2);
  t.config_json = r.text(row, 3);
  t.seed = static_cast<std::uint64_t>(r.integer(row, 4));
  t.status = parse_trial_status(r.text(row, 5));
  t.attempt = static_cast<int>(r.integer(row, 6));
  t.worker = r.text(row, 7);
  t.started_at = r.opt_real(row, 8);
  t.finished_at = r.opt_real(row, 9);
  t.metrics.train_loss = r.opt_real(row, 10);
  t.metrics.train_acc = r.opt_real(row, 11);
  t.metrics.val_loss = r.opt_real(row, 12);
  t.metrics.val_acc = r.opt_real(row, 13);
  t.metrics.test_acc = r.opt_real(row, 14);
  t.metrics.epochs_done = r.integer(row, 15);
  t.metrics.seconds = r.real(row, 16);
  t.error = r.text(row, 17);
  t.provenance = parse_stored_json(r.text(row, 18));
  t.provisional = r.boolean(row, 19);
  t.pinned = r.boolean(row, 20);
  return t;
}

EpochMetrics read_epoch(const pg::Result& r, int row, int first) {
  EpochMetrics m;
  m.epoch = r.integer(row, first);
  m.train_loss = r.opt_real(row, first + 1);
  m.train_acc = r.opt_real(row, first + 2);
  m.val_loss = r.opt_real(row, first + 3);
  m.val_acc = r.opt_real(row, first + 4);
  m.seconds = r.real(row, first + 5);
  m.lr = r.opt_real(row, first + 6);
  return m;
}

EventRecord read_event(const pg::Result& r, int row) {
  return {r.integer(row, 0), r.real(row, 1), r.text(row, 2), parse_stored_json(r.text(row, 3))};
}

}  // namespace

// ---- experiments ----

std::optional<ExperimentRecord> PgResultStore::experiment(std::int64_t id) {
  return retrying(Retry::always, [&]() -> std::optional<ExperimentRecord> {
    check_id(id, "experiment_id");
    pg::Params p;
    p.add(id);
    pg::Result r = db_->query(
        "SELECT " + std::string(kExperimentColumns) + " FROM experiments WHERE id = $1", p);
    if (r.rows() == 0) return std::nullopt;
    return read_experiment(r, 0);
  });
}

std::vector<ExperimentRecord> PgResultStore::experiments() {
  return retrying(Retry::always, [&]() -> std::vector<ExperimentRecord> {
    pg::Result r = db_->query("SELECT " + std::string(kExperimentColumns) +
                              " FROM experiments ORDER BY id DESC");
    std::vector<ExperimentRecord> out;
    for (int i = 0; i < r.rows(); ++i) out.push_back(read_experiment(r, i));
    return out;
  });
}

std::optional<ExperimentRecord> PgResultStore::find_experiment(std::string_view name,
                                                               std::string_view hash) {
  return retrying(Retry::always, [&]() -> std::optional<ExperimentRecord> {
    pg::Params p;
    p.add(name).add(hash);
    pg::Result r = db_->query("SELECT " + std::string(kExperimentColumns) +
                                  " FROM experiments WHERE name = $1 AND spec_hash = $2 "
                                  "ORDER BY id DESC LIMIT 1",
                              p);
    if (r.rows() == 0) return std::nullopt;
    return read_experiment(r, 0);
  });
}

std::optional<std::string> PgResultStore::coordinator(std::int64_t experiment_id) {
  return retrying(Retry::always, [&]() -> std::optional<std::string> {
    check_id(experiment_id, "experiment_id");
    pg::Params p;
    p.add(experiment_id).add(unix_now());
    pg::Result r = db_->query(
        "SELECT holder FROM coordinator_leases WHERE experiment_id = $1 AND deadline >= $2", p);
    if (r.rows() == 0) return std::nullopt;
    return r.text(0, 0);
  });
}

// ---- trials ----

std::vector<TrialRecord> PgResultStore::trials(std::int64_t experiment_id, const TrialQuery& q) {
  return retrying(Retry::always, [&]() -> std::vector<TrialRecord> {
    check_id(experiment_id, "experiment_id");
    // jsonb orders numbers by value and strings as text.
    const std::string order = check_trial_query(
        q, [](std::string_view name) { return "(config::jsonb -> '" + std::string(name) + "')"; });
    pg::Params p;
    p.add(experiment_id);
    std::string sql =
        "SELECT " + std::string(kTrialColumns) + " FROM trials WHERE experiment_id = $1";
    if (q.status) {
      p.add(to_string(*q.status));
      sql += " AND status = $" + std::to_string(p.size());
    }
    if (q.worker) {
      p.add(*q.worker);
      sql += " AND worker = $" + std::to_string(p.size());
    }
    sql += " ORDER BY " + order;
    if (q.limit > 0) {
      p.add(q.limit);
      sql += " LIMIT $" + std::to_string(p.size());
    }
    p.add(q.offset);
    sql += " OFFSET $" + std::to_string(p.size());
    pg::Result r = db_->query(sql, p);
    std::vector<TrialRecord> out;
    out.reserve(r.rows());
    for (int i = 0; i < r.rows(); ++i) out.push_back(read_trial(r, i));
    return out;
  });
}

std::optional<TrialRecord> PgResultStore::trial(std::int64_t trial_id) {
  return retrying(Retry::always, [&]() -> std::optional<TrialRecord> {
    check_id(trial_id, "trial_id");
    pg::Params p;
    p.add(trial_id);
    pg::Result r =
        db_->query("SELECT " + std::string(kTrialColumns) + " FROM trials WHERE id = $1", p);
    if (r.rows() == 0) return std::nullopt;
    TrialRecord t = read_trial(r, 0);
    pg::Params c;
    c.add(trial_id).add(t.attempt);
    pg::Result e = db_->query(
        "SELECT epoch, train_loss, train_acc, val_loss, val_acc, seconds, lr FROM epochs "
        "WHERE trial_id = $1 AND attempt = $2 ORDER BY epoch",
        c);
    for (int i = 0; i < e.rows(); ++i) t.curve.push_back(read_epoch(e, i, 0));
    return t;
  });
}

TrialCounts PgResultStore::trial_counts(std::int64_t experiment_id) {
  return retrying(Retry::always, [&]() -> TrialCounts {
    check_id(experiment_id, "experiment_id");
    pg::Params p;
    p.add(experiment_id);
    // The writers' deltas folded into the experiment's rows (each delta
    // deleted by one reader only: a second one waits, then skips it), then
    // the rows plus the deltas committed since, so the read costs the same
    // at 100,000 trials as at 10.
    pg::Transaction tx(*db_);
    db_->query(
        "WITH d AS (DELETE FROM trial_count_deltas WHERE experiment_id = $1 RETURNING status, n) "
        "INSERT INTO trial_counts (experiment_id, status, n) "
        "SELECT $1, status, sum(n) FROM d GROUP BY status "
        "ON CONFLICT (experiment_id, status) DO UPDATE SET n = trial_counts.n + excluded.n",
        p);
    pg::Result r = db_->query(
        "SELECT status, sum(n) FROM (SELECT status, n FROM trial_counts WHERE experiment_id = $1 "
        "UNION ALL SELECT status, n FROM trial_count_deltas WHERE experiment_id = $1) AS c "
        "GROUP BY status",
        p);
    tx.commit();
    TrialCounts c;
    for (int i = 0; i < r.rows(); ++i) {
      const std::int64_t n = r.integer(i, 1);
      c.of(parse_trial_status(r.text(i, 0))) = n;
    }
    return c;
  });
}

std::optional<TrialRecord> PgResultStore::best_trial(std::int64_t experiment_id,
                                                     std::string_view metric, bool maximize) {
  return retrying(Retry::always, [&]() -> std::optional<TrialRecord> {
    check_id(experiment_id, "experiment_id");
    const std::string column(sort_column(metric, "metric"));
    pg::Params p;
    p.add(experiment_id);
    // NULLS LAST (no NULL passes the filter anyway) is the order of
    // trials_by_status_val_acc: the best is its first entry, where a plain
    // DESC read and sorted every finished trial at every coordinator tick.
    pg::Result r = db_->query("SELECT " + std::string(kTrialColumns) +
                                  " FROM trials WHERE experiment_id = $1 AND status = 'finished' "
                                  "AND NOT provisional AND " +
                                  column + " IS NOT NULL ORDER BY " + column +
                                  (maximize ? " DESC" : " ASC") + " NULLS LAST, idx LIMIT 1",
                              p);
    if (r.rows() == 0) return std::nullopt;
    return read_trial(r, 0);
  });
}

std::vector<TrialEpoch> PgResultStore::epochs_for(std::int64_t experiment_id, std::int64_t epoch) {
  return retrying(Retry::always, [&]() -> std::vector<TrialEpoch> {
    check_id(experiment_id, "experiment_id");
    pg::Params p;
    p.add(experiment_id).add(epoch);
    pg::Result r = db_->query(
        "SELECT t.id, t.idx, e.epoch, e.train_loss, e.train_acc, e.val_loss, e.val_acc, "
        "e.seconds, e.lr FROM trials t JOIN epochs e "
        "ON e.trial_id = t.id AND e.attempt = t.attempt AND e.epoch = $2 "
        "WHERE t.experiment_id = $1 AND NOT t.provisional ORDER BY t.idx",
        p);
    std::vector<TrialEpoch> out;
    for (int i = 0; i < r.rows(); ++i)
      out.push_back({r.integer(i, 0), r.integer(i, 1), read_epoch(r, i, 2)});
    return out;
  });
}

CurveChanges PgResultStore::curves_since(std::int64_t experiment_id, std::int64_t after_id,
                                         std::int64_t limit) {
  return retrying(Retry::always, [&]() -> CurveChanges {
    check_id(experiment_id, "experiment_id");
    check_curve_cursor(after_id, limit);
    // The events numbered first (as events_since does), then the cursor,
    // then the trials: a change committed between is read now and again
    // after its event, which is harmless.
    pg::Transaction tx(*db_);
    sequence_events();
    CurveChanges out;
    pg::Params cp;
    if (after_id != 0) cp.add(after_id).add(limit);
    pg::Result c = db_->query(after_id == 0 ? "SELECT coalesce(max(id), 0), 0 FROM events"
                                            : "SELECT coalesce(max(id), $1), count(*) FROM "
                                              "(SELECT id FROM events WHERE id > $1 ORDER BY id "
                                              "LIMIT $2) AS s",
                              cp);
    tx.commit();
    out.cursor = c.integer(0, 0);
    const std::int64_t read = c.integer(0, 1);
    out.more = read == limit;
    if (after_id != 0 && read == 0) return out;
    pg::Params p;
    p.add(experiment_id);
    if (after_id != 0) p.add(after_id).add(out.cursor);
    // Each touched trial once, found by its id, its current attempt's epochs beside it.
    const std::string touched =
        after_id == 0
            ? "trials t"
            : "(SELECT DISTINCT (data::json->>'trial')::bigint AS tid FROM events WHERE id > $2 "
              "AND id <= $3 AND type IN ('trial.epoch', 'trial.started', 'trial.provisional') "
              "AND (data::json->>'experiment')::bigint = $1) AS ev JOIN trials t ON t.id = ev.tid";
    pg::Result r = db_->query(
        "SELECT t.id, t.idx, t.attempt, t.provisional, e.epoch, e.train_loss, e.train_acc, "
        "e.val_loss, e.val_acc, e.seconds, e.lr FROM " +
            touched +
            " LEFT JOIN epochs e ON e.trial_id = t.id AND e.attempt = t.attempt "
            "WHERE t.experiment_id = $1" +
            (after_id == 0 ? " AND t.attempt > 0" : "") + " ORDER BY t.id, e.epoch",
        p);
    for (int i = 0; i < r.rows(); ++i) {
      if (out.trials.empty() || out.trials.back().trial_id != r.integer(i, 0))
        out.trials.push_back({r.integer(i, 0),
                              r.integer(i, 1),
                              static_cast<int>(r.integer(i, 2)),
                              r.boolean(i, 3),
                              {}});
      if (!r.is_null(i, 4)) out.trials.back().curve.push_back(read_epoch(r, i, 4));
    }
    return out;
  });
}

// ---- workers ----

std::vector<WorkerRecord> PgResultStore::workers() {
  return retrying(Retry::always, [&]() -> std::vector<WorkerRecord> {
    pg::Result r = db_->query(
        "SELECT id, kind, host, pid, started_at, last_seen, current_trial, gone FROM workers "
        "ORDER BY started_at, id");
    std::vector<WorkerRecord> out;
    for (int i = 0; i < r.rows(); ++i) {
      WorkerRecord w;
      w.id = r.text(i, 0);
      w.kind = parse_worker_kind(r.text(i, 1));
      w.host = r.text(i, 2);
      w.pid = r.integer(i, 3);
      w.started_at = r.real(i, 4);
      w.last_seen = r.real(i, 5);
      w.current_trial = r.opt_integer(i, 6);
      w.gone = r.boolean(i, 7);
      out.push_back(std::move(w));
    }
    return out;
  });
}

// ---- events ----

std::vector<EventRecord> PgResultStore::events_since(std::int64_t after_id, std::int64_t limit) {
  return retrying(Retry::always, [&]() -> std::vector<EventRecord> {
    if (after_id < 0)
      throw std::invalid_argument("after_id must not be negative, got " + std::to_string(after_id));
    if (limit < 1 || limit > 10000)
      throw std::invalid_argument("limit must be in 1..10000, got " + std::to_string(limit));
    pg::Transaction tx(*db_);
    sequence_events();
    pg::Params p;
    p.add(after_id).add(limit);
    pg::Result r =
        db_->query("SELECT id, time, type, data FROM events WHERE id > $1 ORDER BY id LIMIT $2", p);
    tx.commit();
    std::vector<EventRecord> out;
    for (int i = 0; i < r.rows(); ++i) out.push_back(read_event(r, i));
    return out;
  });
}

std::vector<EventRecord> PgResultStore::events_of_type(std::string_view type) {
  return retrying(Retry::always, [&]() -> std::vector<EventRecord> {
    pg::Transaction tx(*db_);
    sequence_events();
    pg::Params p;
    p.add(type);
    pg::Result r =
        db_->query("SELECT id, time, type, data FROM events WHERE type = $1 ORDER BY id", p);
    tx.commit();
    std::vector<EventRecord> out;
    for (int i = 0; i < r.rows(); ++i) out.push_back(read_event(r, i));
    return out;
  });
}

}  // namespace dnnlab::store
