// PgResultStore::record_results: a worker's flush of epochs, trial ends and
// starts in at most five round trips (BEGIN, one locking SELECT, one
// statement for the epochs and ends, one for the starts, COMMIT) however many
// rows it holds, instead of about six per epoch, eight per end and four per
// start when each is written alone. The decisions stay in C++ (the same rules as record_epoch /
// finish_trial, on the rows locked here); the writes go as arrays (`unnest($n::T[])`), so the
// statement text, and its prepared plan, is the same for every batch.
#include <cmath>
#include <map>
#include <tuple>

#include "store/pg_result_store.hpp"
#include "store/store_checks.hpp"
#include "store/trial_events.hpp"

namespace dnnlab::store {
namespace {

using namespace checks;  // NOLINT(google-build-using-namespace): the shared argument checks

double finite_or_zero(double v) {
  return std::isfinite(v) ? v : 0.0;
}

// Epoch rows, trial updates, count changes and events, column by column.
struct Columns {
  std::vector<std::int64_t> e_trial, e_epoch;
  std::vector<std::int64_t> e_attempt;
  std::vector<std::optional<double>> e_train_loss, e_train_acc, e_val_loss, e_val_acc, e_lr;
  std::vector<double> e_seconds;

  std::vector<std::int64_t> t_id, t_epochs;
  std::vector<std::string> t_status, t_error;
  std::vector<std::optional<double>> t_train_loss, t_train_acc, t_val_loss, t_val_acc, t_test_acc;
  std::vector<double> t_seconds;

  std::vector<std::int64_t> c_experiment, c_delta;
  std::vector<std::string> c_status;

  std::vector<std::string> v_type, v_data;

  std::vector<std::int64_t> s_id, s_attempt;
  std::vector<std::string> s_worker, s_provenance;
};

// Every write of a batch in one statement: the data-modifying CTEs each run
// once; events go to the inbox and count changes to the deltas, plain inserts
// that wait on no other writer (trial_events.hpp). The trials are found by
// `id = ANY(…)` as well as by the join: with the join alone, and statistics
// from when the table was small, the planner hashed the batch and read the
// whole trials table for every batch (bench/cluster_bench.sh; auto_explain).
constexpr std::string_view kWriteBatch = R"sql(
WITH ep AS (
  INSERT INTO epochs (trial_id, attempt, epoch, train_loss, train_acc, val_loss, val_acc, seconds, lr)
  SELECT * FROM unnest($1::bigint[], $2::int[], $3::bigint[], $4::float8[], $5::float8[],
                       $6::float8[], $7::float8[], $8::float8[], $9::float8[])
  ON CONFLICT (trial_id, attempt, epoch) DO UPDATE SET train_loss = excluded.train_loss,
    train_acc = excluded.train_acc, val_loss = excluded.val_loss, val_acc = excluded.val_acc,
    seconds = excluded.seconds, lr = excluded.lr
), ended AS (
  UPDATE trials AS t SET status = i.status, finished_at = $10, train_loss = i.train_loss,
    train_acc = i.train_acc, val_loss = i.val_loss, val_acc = i.val_acc, test_acc = i.test_acc,
    epochs_done = i.epochs_done, seconds = i.seconds, error = i.error
  FROM unnest($11::bigint[], $12::text[], $13::float8[], $14::float8[], $15::float8[],
              $16::float8[], $17::float8[], $18::bigint[], $19::float8[], $20::text[])
    AS i(id, status, train_loss, train_acc, val_loss, val_acc, test_acc, epochs_done, seconds, error)
  WHERE t.id = i.id AND t.id = ANY($11::bigint[])
), counted AS (
  INSERT INTO trial_count_deltas (experiment_id, status, n)
  SELECT * FROM unnest($21::bigint[], $22::text[], $23::bigint[])
)
INSERT INTO event_inbox (time, type, data)
SELECT $10, e.type, e.data
FROM unnest($24::text[], $25::text[]) WITH ORDINALITY AS e(type, data, n) ORDER BY e.n
)sql";

// A batch's starts in one statement (as PgResultStore::start_locked does
// for one): the trials reset to running, each worker's current trial, the
// count changes and a trial.started event per start (not per retry).
constexpr std::string_view kStartBatch = R"sql(
WITH t AS (
  UPDATE trials AS t SET status = 'running', attempt = s.attempt, worker = s.worker,
    started_at = $5, finished_at = NULL, train_loss = NULL, train_acc = NULL, val_loss = NULL,
    val_acc = NULL, test_acc = NULL, epochs_done = 0, seconds = 0, error = '',
    provenance = s.provenance, provisional = false
  FROM unnest($1::bigint[], $2::int[], $3::text[], $4::text[]) AS s(id, attempt, worker, provenance)
  WHERE t.id = s.id AND t.id = ANY($1::bigint[])
), w AS (
  UPDATE workers SET current_trial = c.trial, last_seen = $5
  FROM unnest($6::text[], $7::bigint[]) AS c(id, trial)
  WHERE workers.id = c.id
), c AS (
  INSERT INTO trial_count_deltas (experiment_id, status, n)
  SELECT * FROM unnest($8::bigint[], $9::text[], $10::bigint[])
)
INSERT INTO event_inbox (time, type, data)
SELECT $5, 'trial.started', e.data FROM unnest($11::text[]) WITH ORDINALITY AS e(data, n) ORDER BY e.n
)sql";

void check_batch(const ResultBatch& batch) {
  for (std::size_t i = 0; i < batch.epochs.size(); ++i) {
    const EpochWrite& e = batch.epochs[i];
    check_id(e.trial_id, "epochs[].trial_id");
    check_attempt(e.attempt, 1);
    if (e.metrics.epoch < 0)
      throw std::invalid_argument("epochs[" + std::to_string(i) + "].epoch must not be negative");
  }
  for (std::size_t i = 0; i < batch.ends.size(); ++i) {
    const TrialEnd& t = batch.ends[i];
    check_id(t.trial_id, "ends[].trial_id");
    check_attempt(t.attempt, 0);
    if (!is_terminal(t.status))
      throw std::invalid_argument("ends[" + std::to_string(i) +
                                  "].status must be finished, pruned, failed or cancelled");
  }
  for (const TrialStart& t : batch.starts) {
    check_id(t.trial_id, "starts[].trial_id");
    check_attempt(t.attempt, 1);
    check_not_empty(t.worker, "starts[].worker");
  }
}

}  // namespace

BatchOutcome PgResultStore::record_results(const ResultBatch& batch) {
  check_batch(batch);
  if (batch.empty()) return {};
  return retrying(Retry::always, [&]() -> BatchOutcome {
    BatchOutcome out;
    out.epochs.assign(batch.epochs.size(), false);
    out.ends.assign(batch.ends.size(), false);
    out.starts.assign(batch.starts.size(), false);
    std::vector<std::int64_t> ids;
    for (const EpochWrite& e : batch.epochs) ids.push_back(e.trial_id);
    for (const TrialEnd& t : batch.ends) ids.push_back(t.trial_id);
    for (const TrialStart& t : batch.starts) ids.push_back(t.trial_id);
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());

    pg::Transaction tx(*db_);
    // The batch's trials, locked in id order (two batches never wait on
    // each other in a cycle), so nothing changes them between decision and write.
    pg::Params key;
    key.add_array(ids);
    pg::Result rows = db_->query(
        "SELECT id, experiment_id, idx, attempt, status, worker FROM trials "
        "WHERE id = ANY($1::bigint[]) "
        "ORDER BY id FOR UPDATE",
        key);
    struct State {
      std::int64_t experiment = 0, index = 0;
      int attempt = 0;
      std::string status, worker;
    };
    std::map<std::int64_t, State> state;
    for (int i = 0; i < rows.rows(); ++i)
      state[rows.integer(i, 0)] = {rows.integer(i, 1), rows.integer(i, 2),
                                   static_cast<int>(rows.integer(i, 3)), rows.text(i, 4),
                                   rows.text(i, 5)};
    for (std::int64_t id : ids)
      if (!state.count(id))
        throw std::invalid_argument("trial_id " + std::to_string(id) + " does not exist");

    const double now = unix_now();
    Columns c;
    // Epochs first (as record_epoch, one by one): a row per (trial, attempt,
    // epoch), the last value written winning, and an event per accepted write.
    std::map<std::tuple<std::int64_t, int, std::int64_t>, std::size_t> row_of;
    for (std::size_t i = 0; i < batch.epochs.size(); ++i) {
      const EpochWrite& e = batch.epochs[i];
      const State& s = state.at(e.trial_id);
      if (s.status != "running" || s.attempt != e.attempt) continue;
      out.epochs[i] = true;
      const EpochMetrics& m = e.metrics;
      c.v_type.emplace_back("trial.epoch");
      c.v_data.push_back(
          trial_events::epoch(s.experiment, e.trial_id, m.epoch, m.val_acc, m.train_loss).dump());
      auto [it, fresh] = row_of.try_emplace({e.trial_id, e.attempt, m.epoch}, c.e_trial.size());
      if (fresh) {
        c.e_trial.push_back(e.trial_id);
        c.e_attempt.push_back(e.attempt);
        c.e_epoch.push_back(m.epoch);
        c.e_train_loss.emplace_back();
        c.e_train_acc.emplace_back();
        c.e_val_loss.emplace_back();
        c.e_val_acc.emplace_back();
        c.e_seconds.emplace_back();
        c.e_lr.emplace_back();
      }
      const std::size_t r = it->second;
      c.e_train_loss[r] = m.train_loss;
      c.e_train_acc[r] = m.train_acc;
      c.e_val_loss[r] = m.val_loss;
      c.e_val_acc[r] = m.val_acc;
      c.e_seconds[r] = finite_or_zero(m.seconds);
      c.e_lr[r] = m.lr;
    }
    // Then ends (as finish_trial): the first end of a trial's current,
    // not yet ended attempt counts; a later one in the batch finds it ended.
    std::map<std::pair<std::int64_t, std::string>, std::int64_t> deltas;
    for (std::size_t i = 0; i < batch.ends.size(); ++i) {
      const TrialEnd& t = batch.ends[i];
      State& s = state.at(t.trial_id);
      if (s.attempt != t.attempt || (s.status != "queued" && s.status != "running")) continue;
      out.ends[i] = true;
      const std::string status(to_string(t.status));
      --deltas[{s.experiment, s.status}];
      ++deltas[{s.experiment, status}];
      s.status = status;
      const TrialMetrics& m = t.metrics;
      c.t_id.push_back(t.trial_id);
      c.t_status.push_back(status);
      c.t_train_loss.push_back(m.train_loss);
      c.t_train_acc.push_back(m.train_acc);
      c.t_val_loss.push_back(m.val_loss);
      c.t_val_acc.push_back(m.val_acc);
      c.t_test_acc.push_back(m.test_acc);
      c.t_epochs.push_back(m.epochs_done);
      c.t_seconds.push_back(finite_or_zero(m.seconds));
      c.t_error.push_back(t.error);
      if (t.status != TrialStatus::cancelled) {
        c.v_type.push_back("trial." + status);
        c.v_data.push_back(trial_events::ended(s.experiment, t.trial_id, s.index, m.val_acc,
                                               m.epochs_done, t.error)
                               .dump());
      }
    }
    for (const auto& [k, n] : deltas)
      if (n != 0) {
        c.c_experiment.push_back(k.first);
        c.c_status.push_back(k.second);
        c.c_delta.push_back(n);
      }
    if (!c.e_trial.empty() || !c.t_id.empty()) {
      pg::Params p;
      p.add_array(c.e_trial).add_array(c.e_attempt).add_array(c.e_epoch);
      p.add_array(c.e_train_loss).add_array(c.e_train_acc).add_array(c.e_val_loss);
      p.add_array(c.e_val_acc).add_array(c.e_seconds).add_array(c.e_lr);
      p.add(now);
      p.add_array(c.t_id).add_array(c.t_status).add_array(c.t_train_loss);
      p.add_array(c.t_train_acc).add_array(c.t_val_loss).add_array(c.t_val_acc);
      p.add_array(c.t_test_acc).add_array(c.t_epochs).add_array(c.t_seconds);
      p.add_array(c.t_error);
      p.add_array(c.c_experiment).add_array(c.c_status).add_array(c.c_delta);
      p.add_array(c.v_type).add_array(c.v_data);
      db_->query(kWriteBatch, p);
    }
    // Then starts (as mark_running, on the rows locked above, after the
    // ends), decided one by one and written in one statement: a worker that
    // leased 16 short trials sends one statement and commits once for all.
    // A trial started twice in the batch keeps its last start's values, as
    // when each is written alone.
    std::map<std::pair<std::int64_t, std::string>, std::int64_t> start_deltas;
    std::map<std::int64_t, std::size_t> start_row;  // trial -> index in the s_ columns
    std::map<std::string, std::int64_t> current;    // worker -> its last trial started
    Columns st;
    for (std::size_t i = 0; i < batch.starts.size(); ++i) {
      const TrialStart& t = batch.starts[i];
      State& s = state.at(t.trial_id);
      const auto d = trial_events::decide_start(s.status, s.attempt, s.worker, t.attempt, t.worker);
      if (!d.allowed) continue;
      out.starts[i] = true;
      if (s.status != "running") {
        --start_deltas[{s.experiment, s.status}];
        ++start_deltas[{s.experiment, "running"}];
      }
      auto [it, fresh] = start_row.try_emplace(t.trial_id, st.s_id.size());
      if (fresh) {
        st.s_id.push_back(t.trial_id);
        st.s_attempt.emplace_back();
        st.s_worker.emplace_back();
        st.s_provenance.emplace_back();
      }
      st.s_attempt[it->second] = t.attempt;
      st.s_worker[it->second] = t.worker;
      st.s_provenance[it->second] = t.provenance.dump();
      if (d.is_start) {
        current[t.worker] = t.trial_id;
        st.v_data.push_back(
            trial_events::started(s.experiment, t.trial_id, s.index, t.worker, t.attempt).dump());
      }
      s.status = "running";
      s.attempt = t.attempt;
      s.worker = t.worker;
    }
    if (!st.s_id.empty()) {
      for (const auto& [k, n] : start_deltas)
        if (n != 0) {
          st.c_experiment.push_back(k.first);
          st.c_status.push_back(k.second);
          st.c_delta.push_back(n);
        }
      std::vector<std::string> w_id;
      std::vector<std::int64_t> w_trial;
      for (const auto& [w, trial] : current) {
        w_id.push_back(w);
        w_trial.push_back(trial);
      }
      pg::Params p;
      p.add_array(st.s_id).add_array(st.s_attempt).add_array(st.s_worker);
      p.add_array(st.s_provenance).add(now);
      p.add_array(w_id).add_array(w_trial);
      p.add_array(st.c_experiment).add_array(st.c_status).add_array(st.c_delta);
      p.add_array(st.v_data);
      db_->query(kStartBatch, p);
    }
    tx.commit();
    return out;
  });
}

}  // namespace dnnlab::store
