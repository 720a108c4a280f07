// ResultStore semantics on every backend (sqlite: always; postgres: on a
// server the test starts, see pg_server.hpp): experiments, idempotent trial
// writes by (trial, attempt), curves, queries, workers, events, bad input.
#include "store/result_store.hpp"

#include <gtest/gtest.h>
#include <sqlite3.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>

#include "queue/test_support.hpp"
#include "store/pg_server.hpp"

namespace dnnlab::store {
namespace {

EpochMetrics at_epoch(std::int64_t epoch, std::optional<double> val_acc = {},
                      std::optional<double> lr = {}) {
  EpochMetrics m;
  m.epoch = epoch;
  m.val_acc = val_acc;
  m.lr = lr;
  return m;
}

template <typename Call>
void expect_invalid(Call&& call, const std::string& needle) {
  try {
    call();
    ADD_FAILURE() << "no std::invalid_argument mentioning '" << needle << "'";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

// The URL of a fresh store on `backend`; "" when its server cannot run here
// (then the test fails under CI and is skipped elsewhere, saying why).
std::string fresh_store_url(const std::string& backend, const testing::TempDir& dir) {
  if (backend == "sqlite") return dir.url("r.db");
  if (auto* pg = testing::PgServer::shared()) return pg->new_database();
  return {};
}

class ResultStoreTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    url_ = fresh_store_url(GetParam(), dir_);
    if (url_.empty()) {
      if (std::getenv("CI")) FAIL() << testing::PgServer::why_missing();
      GTEST_SKIP() << testing::PgServer::why_missing();
    }
    store_ = open_result_store(url_);
    ExperimentRecord e;
    e.name = "depth";
    e.spec_text = "model: mlp\n";
    e.method = "grid";
    exp_ = store_->create_experiment(e);
  }
  // Trials with index 0..n-1, configs {"i": index}, seeds 100+index.
  std::vector<std::int64_t> add(int n) {
    std::vector<NewTrial> trials;
    for (int i = 0; i < n; ++i)
      trials.push_back({i, "{\"i\":" + std::to_string(i) + "}", 100u + i});
    return store_->add_trials(exp_, trials);
  }
  void finish(std::int64_t id, std::optional<double> val_acc,
              TrialStatus status = TrialStatus::finished) {
    ASSERT_TRUE(store_->mark_running(id, 1, "w"));
    TrialMetrics m;
    m.val_acc = val_acc;
    m.epochs_done = 3;
    ASSERT_TRUE(store_->finish_trial(id, 1, status, m));
  }

  testing::TempDir dir_;
  std::string url_;
  std::unique_ptr<ResultStore> store_;
  std::int64_t exp_ = 0;
};
INSTANTIATE_TEST_SUITE_P(Backends, ResultStoreTest, ::testing::Values("sqlite", "postgres"),
                         [](const auto& info) { return info.param; });

// What only the embedded file has (its format, its older versions).
class SqliteFileTest : public ResultStoreTest {};
INSTANTIATE_TEST_SUITE_P(Embedded, SqliteFileTest, ::testing::Values("sqlite"),
                         [](const auto& info) { return info.param; });

TEST(SpecHash, IsSha256) {
  EXPECT_EQ(spec_hash(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(spec_hash("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(spec_hash(std::string(1000, 'a')),
            "41edece42d63e8d9bf515a9ba6932e1c20cbc9f5a5d134645adb5db1b9737ea3");
}

TEST_P(ResultStoreTest, Experiments) {
  auto e = store_->experiment(exp_);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->name, "depth");
  EXPECT_EQ(e->spec_hash, spec_hash("model: mlp\n"));
  EXPECT_EQ(e->status, ExperimentStatus::running);
  EXPECT_GT(e->created_at, 1.6e9);

  ExperimentRecord other;
  other.name = "width";
  other.spec_text = "x";
  other.provenance = {{"build", "abc123"}};
  auto other_id = store_->create_experiment(other);
  auto list = store_->experiments();
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].id, other_id);
  EXPECT_EQ(list[0].provenance["build"], "abc123");

  store_->set_status(exp_, ExperimentStatus::finished);
  EXPECT_EQ(store_->experiment(exp_)->status, ExperimentStatus::finished);
  auto found = store_->find_experiment("depth", spec_hash("model: mlp\n"));
  ASSERT_TRUE(found);
  EXPECT_EQ(found->id, exp_);
  EXPECT_FALSE(store_->find_experiment("depth", spec_hash("model: cnn\n")));
  EXPECT_FALSE(store_->experiment(9999));
  expect_invalid([&] { store_->set_status(9999, ExperimentStatus::failed); }, "experiment_id");
  expect_invalid([&] { store_->create_experiment({}); }, "name");
}

TEST_P(ResultStoreTest, AddTrialsIsAllOrNothing) {
  auto ids = add(3);
  ASSERT_EQ(ids.size(), 3u);
  auto t = store_->trial(ids[1]);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->index, 1);
  EXPECT_EQ(t->seed, 101u);
  EXPECT_EQ(t->config_json, "{\"i\":1}");
  EXPECT_EQ(t->status, TrialStatus::queued);
  EXPECT_EQ(t->attempt, 0);

  expect_invalid([&] { store_->add_trials(exp_, {{7, "{}", 1}, {2, "{}", 1}}); }, "index 2");
  expect_invalid([&] { store_->add_trials(exp_, {{8, "{not json", 1}}); }, "config_json");
  expect_invalid([&] { store_->add_trials(4242, {{0, "{}", 1}}); }, "experiment_id");
  EXPECT_EQ(store_->trial_counts(exp_).total(), 3) << "a failed batch left rows behind";
  std::uint64_t big = ~0ull;
  auto id = store_->add_trials(exp_, {{9, "{}", big}}).at(0);
  EXPECT_EQ(store_->trial(id)->seed, big);
}

TEST_P(ResultStoreTest, FinishIsIdempotentByAttempt) {
  auto id = add(1)[0];
  ASSERT_TRUE(store_->mark_running(id, 1, "w1", {{"compiler", "g++ 12"}}));
  TrialMetrics m;
  m.val_acc = 0.9;
  m.epochs_done = 5;
  m.seconds = 1.5;
  EXPECT_TRUE(store_->finish_trial(id, 1, TrialStatus::finished, m));
  TrialMetrics again = m;
  again.val_acc = 0.1;
  EXPECT_FALSE(store_->finish_trial(id, 1, TrialStatus::finished, again)) << "second write";
  EXPECT_FALSE(store_->finish_trial(id, 2, TrialStatus::failed, again, "late")) << "other attempt";
  EXPECT_FALSE(store_->mark_running(id, 2, "w2")) << "a finished trial restarted";
  auto t = store_->trial(id);
  EXPECT_EQ(t->status, TrialStatus::finished);
  EXPECT_DOUBLE_EQ(*t->metrics.val_acc, 0.9);
  EXPECT_EQ(t->metrics.epochs_done, 5);
  EXPECT_EQ(t->worker, "w1");
  EXPECT_EQ(t->provenance["compiler"], "g++ 12");
  EXPECT_TRUE(t->finished_at);
  EXPECT_EQ(store_->trial_counts(exp_).finished, 1);
}

TEST_P(ResultStoreTest, MergeProvenanceAddsKeysToTheCurrentAttempt) {
  auto id = add(1)[0];
  ASSERT_TRUE(store_->mark_running(id, 1, "w1", {{"kernel_target", "wasm-simd128"}}));
  ASSERT_TRUE(store_->mark_running(id, 2, "w2", {{"kernel_target", "wasm-simd128"}}));
  EXPECT_FALSE(store_->merge_provenance(id, 1, {{"backend", "wasm"}})) << "a stale attempt";
  EXPECT_TRUE(store_->merge_provenance(
      id, 2,
      {{"backend", "webgpu"},
       {"adapter", {{"vendor", "google"}, {"architecture", "swiftshader"}}}}));
  auto t = store_->trial(id);
  EXPECT_EQ(t->provenance["kernel_target"], "wasm-simd128") << "kept";
  EXPECT_EQ(t->provenance["backend"], "webgpu");
  EXPECT_EQ(t->provenance["adapter"]["architecture"], "swiftshader");
  EXPECT_THROW(store_->merge_provenance(id + 1000, 1, {{"backend", "wasm"}}), std::exception)
      << "an unknown trial";
}

TEST_P(ResultStoreTest, StaleAttemptIsIgnored) {
  auto id = add(1)[0];
  ASSERT_TRUE(store_->mark_running(id, 1, "w1"));
  // The lease expired; the queue redelivered the task as attempt 2.
  ASSERT_TRUE(store_->mark_running(id, 2, "w2"));
  EXPECT_FALSE(store_->mark_running(id, 1, "w1"));
  EXPECT_FALSE(store_->record_epoch(id, 1, at_epoch(1, 0.5)));
  EXPECT_FALSE(store_->finish_trial(id, 1, TrialStatus::finished, {}));
  TrialMetrics m;
  m.val_acc = 0.8;
  EXPECT_TRUE(store_->finish_trial(id, 2, TrialStatus::finished, m));
  auto t = store_->trial(id);
  EXPECT_EQ(t->attempt, 2);
  EXPECT_EQ(t->worker, "w2");
  EXPECT_DOUBLE_EQ(*t->metrics.val_acc, 0.8);
}

// A task published twice (a coordinator's recovery republishes) is delivered
// twice with one attempt: the second worker must not run the trial again,
// while the first worker's retried call is harmless.
TEST_P(ResultStoreTest, OneAttemptRunsOnOneWorkerOnly) {
  auto id = add(1)[0];
  ASSERT_TRUE(store_->mark_running(id, 1, "w1"));
  EXPECT_FALSE(store_->mark_running(id, 1, "w2")) << "a duplicate task";
  EXPECT_TRUE(store_->mark_running(id, 1, "w1")) << "the holder's retry";
  EXPECT_EQ(store_->trial(id)->worker, "w1");
  EXPECT_TRUE(store_->mark_running(id, 2, "w2")) << "a redelivery is newer";
  EXPECT_TRUE(store_->finish_trial(id, 2, TrialStatus::finished, {}));
  EXPECT_FALSE(store_->mark_running(id, 3, "w3")) << "ended";
  std::int64_t started = 0;
  for (const auto& e : store_->events_since(0, 100)) started += e.type == "trial.started";
  EXPECT_EQ(started, 2) << "one event per start, none for the retry";
}

TEST_P(ResultStoreTest, PublishedMarkOnlyRises) {
  EXPECT_EQ(store_->experiment(exp_)->published_index, -1);
  store_->set_published(exp_, 7);
  store_->set_published(exp_, 3);
  EXPECT_EQ(store_->experiment(exp_)->published_index, 7);
  EXPECT_THROW(store_->set_published(exp_ + 100, 1), std::invalid_argument);
}

TEST_P(ResultStoreTest, RecordEpochIsIdempotentAndLaterAttemptsReplaceTheCurve) {
  auto id = add(1)[0];
  EXPECT_FALSE(store_->record_epoch(id, 1, at_epoch(1))) << "not running yet";
  ASSERT_TRUE(store_->mark_running(id, 1, "w1"));
  for (int e = 1; e <= 3; ++e) ASSERT_TRUE(store_->record_epoch(id, 1, at_epoch(e, 0.1 * e, 0.01)));
  ASSERT_TRUE(store_->record_epoch(id, 1, at_epoch(2, 0.25)));  // written again
  auto curve = store_->trial(id)->curve;
  ASSERT_EQ(curve.size(), 3u);
  EXPECT_DOUBLE_EQ(*curve[1].val_acc, 0.25);
  EXPECT_FALSE(curve[1].lr) << "replaced row keeps only the new values";
  EXPECT_DOUBLE_EQ(*curve[2].lr, 0.01);

  ASSERT_TRUE(store_->mark_running(id, 2, "w2"));
  ASSERT_TRUE(store_->record_epoch(id, 2, at_epoch(1, 0.7)));
  curve = store_->trial(id)->curve;
  ASSERT_EQ(curve.size(), 1u) << "the earlier attempt's curve still shows";
  EXPECT_DOUBLE_EQ(*curve[0].val_acc, 0.7);
  expect_invalid([&] { store_->record_epoch(id, 2, at_epoch(-1)); }, "epoch");
}

TEST_P(ResultStoreTest, SortFilterAndPage) {
  auto ids = add(6);
  finish(ids[0], 0.5);
  finish(ids[1], 0.9);
  finish(ids[2], std::nullopt);
  finish(ids[3], 0.7);
  finish(ids[4], 0.2, TrialStatus::pruned);
  // ids[5] stays queued

  TrialQuery q;
  q.sort_by = "val_acc";
  q.descending = true;
  auto all = store_->trials(exp_, q);
  ASSERT_EQ(all.size(), 6u);
  std::vector<std::int64_t> order;
  for (const auto& t : all) order.push_back(t.index);
  EXPECT_EQ(order, (std::vector<std::int64_t>{1, 3, 0, 4, 2, 5})) << "empty values sort last";

  q.descending = false;
  EXPECT_EQ(store_->trials(exp_, q).front().index, 4);

  q.status = TrialStatus::finished;
  q.descending = true;
  EXPECT_EQ(store_->trials(exp_, q).size(), 4u);
  q.limit = 2;
  q.offset = 1;
  auto page = store_->trials(exp_, q);
  ASSERT_EQ(page.size(), 2u);
  EXPECT_EQ(page[0].index, 3);
  EXPECT_EQ(page[1].index, 0);

  TrialQuery by_index;
  by_index.limit = 0;
  EXPECT_EQ(store_->trials(exp_, by_index).back().index, 5);

  auto counts = store_->trial_counts(exp_);
  EXPECT_EQ(counts.finished, 4);
  EXPECT_EQ(counts.pruned, 1);
  EXPECT_EQ(counts.queued, 1);
  auto best = store_->best_trial(exp_);
  ASSERT_TRUE(best);
  EXPECT_EQ(best->index, 1);
  EXPECT_EQ(store_->best_trial(exp_, "val_acc", /*maximize=*/false)->index, 0);
  EXPECT_EQ(store_->cancel_trials(exp_), 1);
  EXPECT_EQ(store_->trial_counts(exp_).cancelled, 1);
}

TEST_P(ResultStoreTest, UnknownSortColumnIsNamedAndHarmless) {
  add(2);
  TrialQuery q;
  q.sort_by = "val_acc; DROP TABLE trials";
  expect_invalid([&] { store_->trials(exp_, q); }, "sort_by: unknown column 'val_acc; DROP TABLE");
  expect_invalid([&] { store_->best_trial(exp_, "config"); }, "metric: unknown column 'config'");
  q = {};
  q.sort_by = "params.i') DESC; DROP TABLE trials; --";  // a parameter name is checked too
  expect_invalid([&] { store_->trials(exp_, q); }, "sort_by: 'params.i') DESC");
  q = {};
  q.limit = -1;
  expect_invalid([&] { store_->trials(exp_, q); }, "limit");
  q = {};
  q.offset = -5;
  expect_invalid([&] { store_->trials(exp_, q); }, "offset");
  EXPECT_EQ(store_->trial_counts(exp_).total(), 2);
}

// params.NAME sorts by a value in the trial's config: numbers by value (10
// after 9), trials without the key last in both orders, ties by index.
TEST_P(ResultStoreTest, SortsByAParameter) {
  std::vector<NewTrial> trials;
  for (int i = 0; i < 12; ++i)
    trials.push_back({i, i == 5 ? "{}" : "{\"n\":" + std::to_string((i * 7) % 11) + "}", 1u});
  store_->add_trials(exp_, trials);
  TrialQuery q;
  q.sort_by = "params.n";
  for (bool desc : {false, true}) {
    q.descending = desc;
    std::vector<std::int64_t> idx;
    for (const auto& t : store_->trials(exp_, q)) idx.push_back(t.index);
    ASSERT_EQ(idx.size(), 12u);
    EXPECT_EQ(idx.back(), 5) << "no value: last";
    // n = i*7 % 11: 0 for i = 0 and 11 (ties by index), 10 for i = 3
    if (!desc)
      EXPECT_EQ(std::vector<std::int64_t>(idx.begin(), idx.begin() + 3),
                (std::vector<std::int64_t>{0, 11, 8}));
    else
      EXPECT_EQ(idx.front(), 3);
  }
}

TEST_P(ResultStoreTest, BadIdsAreNamed) {
  expect_invalid([&] { store_->trial(0); }, "trial_id");
  expect_invalid([&] { store_->mark_running(777, 1, "w"); }, "trial_id 777 does not exist");
  expect_invalid([&] { store_->record_epoch(777, 1, {}); }, "trial_id 777");
  expect_invalid([&] { store_->finish_trial(777, 1, TrialStatus::finished, {}); }, "trial_id");
  auto id = add(1)[0];
  expect_invalid([&] { store_->mark_running(id, 0, "w"); }, "attempt");
  expect_invalid([&] { store_->mark_running(id, 1, ""); }, "worker_id");
  expect_invalid([&] { store_->finish_trial(id, 1, TrialStatus::running, {}); }, "status");
  expect_invalid([&] { parse_trial_status("done"); }, "status: unknown value 'done'");
  EXPECT_FALSE(store_->trial(12345));
}

TEST_P(ResultStoreTest, EpochsForAshaUseCurrentAttempts) {
  auto ids = add(3);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(store_->mark_running(ids[i], 1, "w"));
    ASSERT_TRUE(store_->record_epoch(ids[i], 1, at_epoch(1, 0.1 * (i + 1))));
  }
  ASSERT_TRUE(store_->mark_running(ids[2], 2, "w"));  // restarted: its epoch 1 is gone
  auto rung = store_->epochs_for(exp_, 1);
  ASSERT_EQ(rung.size(), 2u);
  EXPECT_EQ(rung[0].trial_id, ids[0]);
  EXPECT_EQ(rung[1].trial_index, 1);
  EXPECT_DOUBLE_EQ(*rung[1].metrics.val_acc, 0.2);
  EXPECT_TRUE(store_->epochs_for(exp_, 2).empty());
}

TEST_P(ResultStoreTest, WorkersAndHeartbeats) {
  WorkerRecord w;
  w.id = "host-1:123";
  w.kind = WorkerKind::native;
  w.host = "host-1";
  w.pid = 123;
  store_->upsert_worker(w);
  auto before = store_->workers().at(0).last_seen;
  store_->heartbeat("host-1:123", 42);
  auto list = store_->workers();
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0].current_trial, 42);
  EXPECT_GE(list[0].last_seen, before);
  EXPECT_FALSE(list[0].gone);
  store_->heartbeat("host-1:123", std::nullopt);
  EXPECT_FALSE(store_->workers()[0].current_trial);
  store_->mark_worker_gone("host-1:123");
  EXPECT_TRUE(store_->workers()[0].gone);
  w.kind = WorkerKind::browser;
  store_->upsert_worker(w);
  EXPECT_EQ(store_->workers()[0].kind, WorkerKind::browser);
  EXPECT_FALSE(store_->workers()[0].gone);
  expect_invalid([&] { store_->heartbeat("nobody", 1); }, "worker_id 'nobody'");
  expect_invalid([&] { store_->mark_worker_gone("nobody"); }, "nobody");
  expect_invalid([&] { parse_worker_kind("gpu"); }, "kind");
}

TEST_P(ResultStoreTest, EventsSince) {
  std::vector<std::int64_t> ids;
  for (int i = 0; i < 5; ++i) ids.push_back(store_->append_event("trial.epoch", {{"n", i}}));
  auto events = store_->events_since(ids[1]);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].id, ids[2]);
  EXPECT_EQ(events[0].type, "trial.epoch");
  EXPECT_EQ(events[0].data["n"], 2);
  EXPECT_GT(events[0].time, 1.6e9);
  EXPECT_EQ(store_->events_since(0, 2).size(), 2u);
  EXPECT_TRUE(store_->events_since(ids[4]).empty());
  expect_invalid([&] { store_->events_since(0, 0); }, "limit");
  expect_invalid([&] { store_->append_event("", {}); }, "event type");
}

TEST_P(ResultStoreTest, EventsOfOneType) {
  store_->append_event("worker.joined", {{"n", 0}});
  store_->append_event("worker.quarantined", {{"n", 1}});
  store_->append_event("worker.joined", {{"n", 2}});
  store_->append_event("worker.quarantined", {{"n", 3}});
  auto q = store_->events_of_type("worker.quarantined");
  ASSERT_EQ(q.size(), 2u);
  EXPECT_EQ(q[0].data["n"], 1);
  EXPECT_EQ(q[1].data["n"], 3);
  EXPECT_LT(q[0].id, q[1].id);
  EXPECT_TRUE(store_->events_of_type("nothing.like.this").empty());
}

TEST(ResultStoreFactory, Urls) {
  testing::TempDir dir;
  EXPECT_NE(open_result_store(dir.url("s.db")), nullptr);
  try {
    // Nothing listens on port 1: the error names the server, never the password.
    open_result_store("postgres://dnnlab:hunter2@127.0.0.1:1/dnnlab?connect_timeout=2");
    FAIL();
  } catch (const std::runtime_error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("cannot connect"), std::string::npos) << msg;
    EXPECT_NE(msg.find("127.0.0.1:1"), std::string::npos) << msg;
    EXPECT_EQ(msg.find("hunter2"), std::string::npos) << msg;
  }
  for (std::string url : {"amqp://rabbit", "mysql://x/y", "results.db", "sqlite:"})
    expect_invalid([&] { open_result_store(url); }, "'" + url + "'");
}

TEST(ResultStoreMigrations, SharesTheFileWithTheQueueAndRejectsNewerSchemas) {
  testing::TempDir dir;
  open_result_store(dir.url("s.db"));
  open_result_store(dir.url("s.db"));  // reopening is a no-op
  {
    sqlite3* raw = nullptr;
    ASSERT_EQ(sqlite3_open(dir.file("s.db").c_str(), &raw), SQLITE_OK);
    std::unique_ptr<sqlite3, decltype(&sqlite3_close)> db(raw, &sqlite3_close);
    ASSERT_EQ(
        sqlite3_exec(db.get(), "UPDATE schema_version SET version = 99 WHERE component = 'store'",
                     nullptr, nullptr, nullptr),
        SQLITE_OK);
  }
  try {
    open_result_store(dir.url("s.db"));
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("store schema version 99"), std::string::npos) << e.what();
  }
}

TEST_P(SqliteFileTest, CountsOfAVersion2FileAreRebuiltOnOpen) {
  auto ids = add(5);
  finish(ids[0], 0.5);
  finish(ids[1], 0.6, TrialStatus::pruned);
  ASSERT_TRUE(store_->mark_running(ids[2], 1, "w"));
  store_.reset();
  {
    // What a file written before the counts table looks like.
    sqlite3* raw = nullptr;
    ASSERT_EQ(sqlite3_open(dir_.file("r.db").c_str(), &raw), SQLITE_OK);
    std::unique_ptr<sqlite3, decltype(&sqlite3_close)> db(raw, &sqlite3_close);
    ASSERT_EQ(sqlite3_exec(db.get(),
                           "DROP TABLE trial_counts; "
                           "DROP TABLE trial_weights; "
                           "ALTER TABLE trials DROP COLUMN pinned; "
                           "ALTER TABLE trials DROP COLUMN provisional; "
                           "DROP TABLE coordinator_leases; "
                           "ALTER TABLE experiments DROP COLUMN published_index; "
                           "UPDATE schema_version SET version = 2 WHERE component = 'store'",
                           nullptr, nullptr, nullptr),
              SQLITE_OK);
  }
  store_ = open_result_store(dir_.url("r.db"));
  auto c = store_->trial_counts(exp_);
  EXPECT_EQ(c.finished, 1);
  EXPECT_EQ(c.pruned, 1);
  EXPECT_EQ(c.running, 1);
  EXPECT_EQ(c.queued, 2);
  EXPECT_EQ(store_->cancel_trials(exp_), 3);
  c = store_->trial_counts(exp_);
  EXPECT_EQ(c.cancelled, 3);
  EXPECT_EQ(c.queued + c.running, 0);
  EXPECT_EQ(c.total(), 5);
}

TEST_P(ResultStoreTest, ReleaseGivesARunningTrialBackAndTrialChangesLogEvents) {
  auto id = add(1)[0];
  store_->upsert_worker({"w1", WorkerKind::native, "h", 1, 0.0});
  const auto before = store_->events_since(0).size();
  ASSERT_TRUE(store_->mark_running(id, 1, "w1"));
  EXPECT_EQ(store_->workers()[0].current_trial, id) << "mark_running sets the worker's trial";
  EXPECT_FALSE(store_->release_trial(id, 2)) << "not the running attempt";
  EXPECT_TRUE(store_->release_trial(id, 1));
  EXPECT_FALSE(store_->release_trial(id, 1)) << "already released";
  EXPECT_EQ(store_->trial(id)->status, TrialStatus::queued);
  EXPECT_EQ(store_->trial_counts(exp_).queued, 1);
  ASSERT_TRUE(store_->mark_running(id, 2, "w1"));
  EpochMetrics e;
  e.epoch = 1;
  e.val_acc = 0.5;
  ASSERT_TRUE(store_->record_epoch(id, 2, e));
  TrialMetrics m;
  m.val_acc = 0.5;
  ASSERT_TRUE(store_->finish_trial(id, 2, TrialStatus::finished, m));
  std::vector<std::string> types;
  for (const auto& ev : store_->events_since(0)) types.push_back(ev.type);
  types.erase(types.begin(), types.begin() + static_cast<std::ptrdiff_t>(before));
  EXPECT_EQ(types, (std::vector<std::string>{"trial.started", "trial.started", "trial.epoch",
                                             "trial.finished"}));
  EXPECT_THROW(store_->release_trial(999, 1), std::invalid_argument);
}

TEST_P(ResultStoreTest, ReopenPutsAnEndedTrialBackAsANewerAttempt) {
  auto ids = add(3);
  const auto id = ids[0];
  ASSERT_TRUE(store_->mark_running(id, 1, "w1"));
  ASSERT_TRUE(store_->record_epoch(id, 1, at_epoch(1, 0.4)));
  ASSERT_TRUE(store_->record_epoch(id, 1, at_epoch(2, 0.6)));
  TrialMetrics m;
  m.val_acc = 0.6;
  m.test_acc = 0.55;
  m.epochs_done = 2;
  m.seconds = 3.0;
  ASSERT_TRUE(store_->finish_trial(id, 1, TrialStatus::finished, m));
  EXPECT_EQ(store_->reopen_trial(ids[1]), std::nullopt) << "queued: not ended";
  ASSERT_TRUE(store_->mark_running(ids[1], 1, "w2"));
  EXPECT_EQ(store_->reopen_trial(ids[1]), std::nullopt) << "running: not ended";
  const auto before = store_->events_since(0).size();

  EXPECT_EQ(store_->reopen_trial(id), 1);
  auto t = store_->trial(id);
  EXPECT_EQ(t->status, TrialStatus::queued);
  EXPECT_EQ(t->attempt, 1);
  EXPECT_EQ(t->worker, "");
  EXPECT_FALSE(t->finished_at);
  EXPECT_FALSE(t->metrics.val_acc);
  EXPECT_FALSE(t->metrics.test_acc);
  EXPECT_EQ(t->metrics.epochs_done, 0);
  EXPECT_EQ(t->error, "");
  EXPECT_EQ(t->curve.size(), 2u) << "the old rows are kept until a newer attempt runs";
  auto counts = store_->trial_counts(exp_);
  EXPECT_EQ(counts.finished, 0);
  EXPECT_EQ(counts.queued, 2);
  EXPECT_EQ(store_->reopen_trial(id), std::nullopt) << "already queued again";
  auto events = store_->events_since(0);
  ASSERT_EQ(events.size(), before + 1);
  EXPECT_EQ(events.back().type, "trial.reopened");
  EXPECT_EQ(events.back().data,
            (nlohmann::json{{"trial", id}, {"experiment", exp_}, {"attempt", 1}}));

  // The new task runs as attempt_base + delivery attempt = 1 + 1.
  ASSERT_TRUE(store_->mark_running(id, 2, "w3"));
  EXPECT_TRUE(store_->trial(id)->curve.empty()) << "attempt 1's curve is not shown";
  ASSERT_TRUE(store_->record_epoch(id, 2, at_epoch(1, 0.7)));
  m.val_acc = 0.7;
  ASSERT_TRUE(store_->finish_trial(id, 2, TrialStatus::finished, m));
  t = store_->trial(id);
  EXPECT_EQ(t->attempt, 2);
  ASSERT_EQ(t->curve.size(), 1u);
  EXPECT_DOUBLE_EQ(*t->curve[0].val_acc, 0.7);
  EXPECT_DOUBLE_EQ(*t->metrics.val_acc, 0.7);
  EXPECT_EQ(store_->epochs_for(exp_, 2).size(), 0u) << "epoch 2 was attempt 1's only";

  // Pruned and failed trials reopen too; cancelled ones do not.
  TrialMetrics none;
  ASSERT_TRUE(store_->finish_trial(ids[1], 1, TrialStatus::failed, none, "boom"));
  EXPECT_EQ(store_->reopen_trial(ids[1]), 1);
  EXPECT_EQ(store_->trial(ids[1])->error, "");
  ASSERT_TRUE(store_->mark_running(ids[2], 1, "w1"));
  ASSERT_TRUE(store_->finish_trial(ids[2], 1, TrialStatus::pruned, none));
  EXPECT_EQ(store_->reopen_trial(ids[2]), 1);
  EXPECT_EQ(store_->cancel_trials(exp_), 2);
  EXPECT_EQ(store_->reopen_trial(ids[1]), std::nullopt) << "cancelled";

  expect_invalid([&] { store_->reopen_trial(999); }, "trial_id 999");
  expect_invalid([&] { store_->reopen_trial(0); }, "trial_id");
}

TEST_P(ResultStoreTest, TrialsFilterByWorker) {
  auto ids = add(4);
  ASSERT_TRUE(store_->mark_running(ids[0], 1, "w1"));
  ASSERT_TRUE(store_->mark_running(ids[1], 1, "w2"));
  ASSERT_TRUE(store_->mark_running(ids[2], 1, "w1"));
  TrialMetrics m;
  m.val_acc = 0.5;
  ASSERT_TRUE(store_->finish_trial(ids[2], 1, TrialStatus::finished, m));
  TrialQuery q;
  q.worker = "w1";
  std::vector<std::int64_t> got;
  for (const auto& t : store_->trials(exp_, q)) got.push_back(t.id);
  EXPECT_EQ(got, (std::vector<std::int64_t>{ids[0], ids[2]}));
  q.status = TrialStatus::running;
  got.clear();
  for (const auto& t : store_->trials(exp_, q)) got.push_back(t.id);
  EXPECT_EQ(got, (std::vector<std::int64_t>{ids[0]}));
  q.status.reset();
  q.worker = "nobody";
  EXPECT_TRUE(store_->trials(exp_, q).empty());
  q.worker.reset();
  EXPECT_EQ(store_->trials(exp_, q).size(), 4u);
}

// Seeds are unsigned 64-bit: those above 2^63 (stored as negative int64 in
// SQLite) must sort after the smaller ones, in both orders.
TEST_P(ResultStoreTest, SeedsSortUnsigned) {
  const std::vector<std::uint64_t> seeds = {
      14612436867286432432ull, 1052595102462929473ull, 5, 18446744073709551615ull,
      9223372036854775808ull,  9223372036854775807ull, 0};
  std::vector<NewTrial> trials;
  for (std::size_t i = 0; i < seeds.size(); ++i)
    trials.push_back({static_cast<std::int64_t>(i), "{}", seeds[i]});
  store_->add_trials(exp_, trials);
  std::vector<std::uint64_t> sorted = seeds;
  std::sort(sorted.begin(), sorted.end());
  TrialQuery q;
  q.sort_by = "seed";
  std::vector<std::uint64_t> got;
  for (const auto& t : store_->trials(exp_, q)) got.push_back(t.seed);
  EXPECT_EQ(got, sorted);
  q.descending = true;
  got.clear();
  for (const auto& t : store_->trials(exp_, q)) got.push_back(t.seed);
  EXPECT_EQ(got, std::vector<std::uint64_t>(sorted.rbegin(), sorted.rend()));
  q.limit = 2;
  q.offset = 1;  // paging walks the same order
  got.clear();
  for (const auto& t : store_->trials(exp_, q)) got.push_back(t.seed);
  EXPECT_EQ(got, (std::vector<std::uint64_t>{sorted[5], sorted[4]}));
}

// A running trial is listed at its last stored epoch (metrics and count), so
// the dashboard shows how far it got before finish_trial writes its row.
TEST_P(ResultStoreTest, RunningTrialsAreListedAtTheirLastEpoch) {
  auto ids = add(2);
  ASSERT_TRUE(store_->mark_running(ids[0], 1, "w1"));
  ASSERT_TRUE(store_->record_epoch(ids[0], 1, at_epoch(1, 0.4)));
  ASSERT_TRUE(store_->record_epoch(ids[0], 1, at_epoch(2, 0.6)));
  TrialQuery q;
  const auto listed = store_->trials(exp_, q);
  ASSERT_EQ(listed.size(), 2u);
  EXPECT_EQ(listed[0].metrics.epochs_done, 2);
  ASSERT_TRUE(listed[0].metrics.val_acc);
  EXPECT_DOUBLE_EQ(*listed[0].metrics.val_acc, 0.6);
  EXPECT_EQ(store_->trial(ids[0])->metrics.epochs_done, 2);
  EXPECT_EQ(listed[1].metrics.epochs_done, 0);  // queued
  EXPECT_FALSE(listed[1].metrics.val_acc);
  TrialMetrics m;
  m.val_acc = 0.65;
  m.epochs_done = 3;
  ASSERT_TRUE(store_->finish_trial(ids[0], 1, TrialStatus::finished, m));
  EXPECT_EQ(store_->trial(ids[0])->metrics.epochs_done, 3);  // the ended row's own
  EXPECT_DOUBLE_EQ(*store_->trial(ids[0])->metrics.val_acc, 0.65);
}

// A trial cancelled while running keeps the epochs its curve shows and gets a
// trial.cancelled event; queued trials are cancelled quietly (the experiment's
// own event covers them, and one event per queued trial would flood the stream).
TEST_P(ResultStoreTest, CancelKeepsTheCurveCountAndLogsRunningTrials) {
  auto ids = add(3);
  ASSERT_TRUE(store_->mark_running(ids[0], 1, "w1"));
  for (int ep = 1; ep <= 6; ++ep) ASSERT_TRUE(store_->record_epoch(ids[0], 1, at_epoch(ep, 0.5)));
  finish(ids[1], 0.7);
  const auto before = store_->events_since(0, 10000);
  const std::int64_t last = before.empty() ? 0 : before.back().id;
  EXPECT_EQ(store_->cancel_trials(exp_), 2);
  auto t = store_->trial(ids[0]);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->status, TrialStatus::cancelled);
  EXPECT_EQ(t->curve.size(), 6u);
  EXPECT_EQ(t->metrics.epochs_done, 6);
  EXPECT_EQ(store_->trial(ids[2])->metrics.epochs_done, 0);
  EXPECT_EQ(store_->trial(ids[1])->metrics.epochs_done, 3);  // ended before: untouched
  auto events = store_->events_since(last, 10000);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].type, "trial.cancelled");
  EXPECT_EQ(events[0].data["trial"], ids[0]);
  EXPECT_EQ(events[0].data["experiment"], exp_);
  EXPECT_EQ(events[0].data["worker"], "w1");
  EXPECT_EQ(events[0].data["epochs"], 6);
  // Nothing left to cancel: no change, no event.
  EXPECT_EQ(store_->cancel_trials(exp_), 0);
  EXPECT_TRUE(store_->events_since(events[0].id, 10).empty());
}

}  // namespace
}  // namespace dnnlab::store

namespace dnnlab::store {
namespace {

// The events cursor is commit-ordered: a dashboard that reads events_since
// its last id while several processes commit events never skips one (a
// plain PostgreSQL sequence would: ids are taken in one order and
// committed in another).
TEST_P(ResultStoreTest, AReaderFollowingTheCursorSeesEveryEventOnceInOrder) {
  constexpr int kWriters = 4, kEach = 150;
  const std::int64_t before = store_->events_since(0, 10000).size();
  store_.reset();  // the children open their own connections
  const std::string url = url_;
  auto codes = testing::run_in_children(kWriters + 1, [&](int c) {
    auto s = open_result_store(url);
    if (c < kWriters) {
      for (int i = 0; i < kEach; ++i) s->append_event("test.tick", {{"writer", c}, {"i", i}});
      return 0;
    }
    // The reader: follows the cursor like the dashboard does.
    std::int64_t cursor = 0, seen = 0;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    std::vector<int> next(kWriters, 0);  // each writer's events arrive in its order
    while (seen < before + kWriters * kEach) {
      if (std::chrono::steady_clock::now() > deadline) return 2;
      for (const auto& e : s->events_since(cursor, 50)) {
        if (e.id <= cursor) return 3;
        cursor = e.id;
        ++seen;
        if (e.type != "test.tick") continue;
        const int w = e.data["writer"], i = e.data["i"];
        if (i != next[w]++) return 4;  // one skipped (or seen twice)
      }
    }
    return 0;
  });
  for (int code : codes) EXPECT_EQ(code, 0);
  store_ = open_result_store(url);
  EXPECT_EQ(store_->events_of_type("test.tick").size(), static_cast<std::size_t>(kWriters * kEach));
}

}  // namespace
}  // namespace dnnlab::store
