// ResultStore::record_results on every backend: each item of a batch is
// decided as record_epoch / finish_trial would decide it alone; on
// PostgreSQL a batch costs a fixed handful of round trips, and a call made
// while the server restarts waits for it and is kept once.
#include <gtest/gtest.h>

#include <cstdlib>
#include <thread>

#include "queue/test_support.hpp"
#include "store/pg_result_store.hpp"
#include "store/pg_server.hpp"
#include "store/result_store.hpp"

namespace dnnlab::store {
namespace {

EpochMetrics at_epoch(std::int64_t epoch, double val_acc) {
  EpochMetrics m;
  m.epoch = epoch;
  m.val_acc = val_acc;
  m.seconds = 0.01;
  return m;
}

TrialEnd end_of(std::int64_t id, int attempt, TrialStatus status, double val_acc,
                std::int64_t epochs) {
  TrialEnd t;
  t.trial_id = id;
  t.attempt = attempt;
  t.status = status;
  t.metrics.val_acc = val_acc;
  t.metrics.epochs_done = epochs;
  return t;
}

// The URL of a fresh store; "" when PostgreSQL cannot run here.
std::string fresh_url(const std::string& backend, const testing::TempDir& dir) {
  if (backend == "sqlite") return dir.url("r.db");
  if (auto* pg = testing::PgServer::shared()) return pg->new_database();
  return {};
}

#define REQUIRE_URL(url)                                               \
  if ((url).empty()) {                                                 \
    if (std::getenv("CI")) FAIL() << testing::PgServer::why_missing(); \
    GTEST_SKIP() << testing::PgServer::why_missing();                  \
  }

class ResultBatchTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    url_ = fresh_url(GetParam(), dir_);
    REQUIRE_URL(url_);
    store_ = open_result_store(url_);
    ExperimentRecord e;
    e.name = "batch";
    e.spec_text = "x";
    exp_ = store_->create_experiment(e);
  }
  std::vector<std::int64_t> add(int n) {
    std::vector<NewTrial> trials;
    for (int i = 0; i < n; ++i) trials.push_back({i, "{}", 1u});
    return store_->add_trials(exp_, trials);
  }
  std::int64_t events_of(const std::string& type) {
    return static_cast<std::int64_t>(store_->events_of_type(type).size());
  }

  testing::TempDir dir_;
  std::string url_;
  std::unique_ptr<ResultStore> store_;
  std::int64_t exp_ = 0;
};

INSTANTIATE_TEST_SUITE_P(Backends, ResultBatchTest, ::testing::Values("sqlite", "postgres"),
                         [](const auto& info) { return info.param; });

TEST_P(ResultBatchTest, EachItemIsDecidedAsTheSingleCallWould) {
  auto ids = add(4);
  const auto a = ids[0], queued = ids[1], c = ids[2], d = ids[3];
  ASSERT_TRUE(store_->mark_running(a, 1, "w1"));
  ASSERT_TRUE(store_->mark_running(c, 1, "w1"));
  ASSERT_TRUE(store_->mark_running(c, 2, "w2"));  // attempt 1 of c is stale
  ASSERT_TRUE(store_->mark_running(d, 1, "w1"));

  ResultBatch b;
  b.epochs = {{a, 1, at_epoch(1, 0.1)},      {a, 1, at_epoch(2, 0.2)},
              {a, 1, at_epoch(2, 0.25)},      // written again: the later value wins
              {queued, 1, at_epoch(1, 0.5)},  // not running
              {c, 1, at_epoch(1, 0.6)},       // stale attempt
              {c, 2, at_epoch(1, 0.7)}};
  b.ends = {end_of(a, 1, TrialStatus::finished, 0.25, 2),
            end_of(a, 1, TrialStatus::failed, 0.0, 0),    // ended already, in this batch
            end_of(c, 1, TrialStatus::finished, 0.6, 1),  // stale
            end_of(c, 2, TrialStatus::pruned, 0.7, 1),
            end_of(d, 1, TrialStatus::cancelled, 0.0, 0)};
  const BatchOutcome out = store_->record_results(b);
  EXPECT_EQ(out.epochs, (std::vector<bool>{true, true, true, false, false, true}));
  EXPECT_EQ(out.ends, (std::vector<bool>{true, false, false, true, true}));

  auto ta = store_->trial(a);
  EXPECT_EQ(ta->status, TrialStatus::finished);
  ASSERT_EQ(ta->curve.size(), 2u);
  EXPECT_DOUBLE_EQ(*ta->curve[1].val_acc, 0.25);
  EXPECT_DOUBLE_EQ(*ta->metrics.val_acc, 0.25);
  EXPECT_EQ(store_->trial(queued)->status, TrialStatus::queued);
  EXPECT_TRUE(store_->trial(queued)->curve.empty());
  auto tc = store_->trial(c);
  EXPECT_EQ(tc->status, TrialStatus::pruned);
  ASSERT_EQ(tc->curve.size(), 1u);
  EXPECT_DOUBLE_EQ(*tc->curve[0].val_acc, 0.7);
  EXPECT_EQ(store_->trial(d)->status, TrialStatus::cancelled);

  TrialCounts n = store_->trial_counts(exp_);
  EXPECT_EQ(n.queued, 1);
  EXPECT_EQ(n.running, 0);
  EXPECT_EQ(n.finished, 1);
  EXPECT_EQ(n.pruned, 1);
  EXPECT_EQ(n.cancelled, 1);
  EXPECT_EQ(n.total(), 4);
  // One event per accepted write, as the single calls log them; none for a cancel.
  EXPECT_EQ(events_of("trial.epoch"), 4);
  EXPECT_EQ(events_of("trial.finished"), 1);
  EXPECT_EQ(events_of("trial.pruned"), 1);
  EXPECT_EQ(events_of("trial.failed"), 0);
  EXPECT_EQ(events_of("trial.cancelled"), 0);

  // Sent again as it is (a flush retried): nothing more is kept or counted.
  const BatchOutcome again = store_->record_results(b);
  EXPECT_EQ(again.ends, (std::vector<bool>(5, false)));
  EXPECT_EQ(store_->trial_counts(exp_).finished, 1);
  EXPECT_EQ(store_->trial(a)->curve.size(), 2u);
  EXPECT_EQ(events_of("trial.finished"), 1);
}

// Starts, after the ends: a worker's next leases started in its one commit,
// each decided as mark_running would decide it alone.
TEST_P(ResultBatchTest, StartsAreDecidedAsMarkRunningWouldAfterTheEnds) {
  auto ids = add(4);
  const auto fresh = ids[0], mine = ids[1], theirs = ids[2], ending = ids[3];
  ASSERT_TRUE(store_->mark_running(mine, 1, "w1"));
  ASSERT_TRUE(store_->mark_running(theirs, 1, "w2"));
  ASSERT_TRUE(store_->mark_running(ending, 1, "w1"));
  ResultBatch b;
  b.ends = {end_of(ending, 1, TrialStatus::finished, 0.5, 1)};
  b.starts = {{fresh, 1, "w1", {{"host", "h"}}},
              {mine, 1, "w1", {}},    // the holder's retry: allowed, no new start
              {theirs, 1, "w1", {}},  // the same attempt on another worker: refused
              {ending, 2, "w1", {}},  // ended in this batch: refused
              {fresh, 1, "w3", {}}};  // started by this batch already, on w1
  const BatchOutcome out = store_->record_results(b);
  EXPECT_EQ(out.ends, std::vector<bool>{true});
  EXPECT_EQ(out.starts, (std::vector<bool>{true, true, false, false, false}));
  auto t = store_->trial(fresh);
  EXPECT_EQ(t->status, TrialStatus::running);
  EXPECT_EQ(t->worker, "w1");
  EXPECT_EQ(t->attempt, 1);
  EXPECT_EQ(t->provenance["host"], "h");
  EXPECT_EQ(store_->trial(theirs)->worker, "w2");
  EXPECT_EQ(store_->trial(ending)->status, TrialStatus::finished);
  TrialCounts n = store_->trial_counts(exp_);
  EXPECT_EQ(n.queued, 0);
  EXPECT_EQ(n.running, 3);
  EXPECT_EQ(n.finished, 1);
  EXPECT_EQ(events_of("trial.started"), 4);  // 3 single starts + the batch's one

  // Sent again (a retried flush): the holder's retries, nothing new counted.
  const BatchOutcome again = store_->record_results(b);
  EXPECT_EQ(again.starts, (std::vector<bool>{true, true, false, false, false}));
  EXPECT_EQ(store_->trial_counts(exp_).running, 3);
  EXPECT_EQ(events_of("trial.started"), 4);
}

// One statement writes all of a batch's starts: a trial started twice in
// it keeps its last start (as two mark_running calls leave it), each start
// logs its event, and the worker's current trial is the last one it started.
TEST_P(ResultBatchTest, ATrialStartedTwiceInABatchKeepsItsLastStart) {
  auto ids = add(3);
  WorkerRecord w;
  w.id = "w1";
  w.kind = WorkerKind::native;
  store_->upsert_worker(w);
  ResultBatch b;
  b.starts = {{ids[0], 1, "w1", {{"host", "h1"}}},
              {ids[1], 1, "w1", {}},
              {ids[0], 2, "w1", {{"host", "h2"}}},  // a newer attempt: a new start
              {ids[2], 1, "w1", {}}};
  const BatchOutcome out = store_->record_results(b);
  EXPECT_EQ(out.starts, (std::vector<bool>{true, true, true, true}));
  auto t = store_->trial(ids[0]);
  EXPECT_EQ(t->status, TrialStatus::running);
  EXPECT_EQ(t->attempt, 2);
  EXPECT_EQ(t->provenance["host"], "h2");
  EXPECT_EQ(store_->trial(ids[1])->attempt, 1);
  const TrialCounts n = store_->trial_counts(exp_);
  EXPECT_EQ(n.queued, 0);
  EXPECT_EQ(n.running, 3);
  EXPECT_EQ(events_of("trial.started"), 4);
  bool found = false;
  for (const auto& r : store_->workers())
    if (r.id == "w1") {
      found = true;
      EXPECT_EQ(r.current_trial, std::optional<std::int64_t>(ids[2]));
    }
  EXPECT_TRUE(found);
}

TEST_P(ResultBatchTest, BadItemsAreNamedAndNothingIsKept) {
  auto id = add(1)[0];
  ASSERT_TRUE(store_->mark_running(id, 1, "w"));
  ResultBatch b;
  b.epochs = {{id, 1, at_epoch(1, 0.1)}, {999, 1, at_epoch(1, 0.1)}};
  try {
    store_->record_results(b);
    ADD_FAILURE() << "no error for trial 999";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("trial_id 999"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(store_->trial(id)->curve.empty()) << "all or nothing";
  b.epochs = {{id, 1, at_epoch(-1, 0.1)}};
  EXPECT_THROW(store_->record_results(b), std::invalid_argument);
  EXPECT_TRUE(store_->record_results({}).ends.empty());
}

// The reason for batches: on PostgreSQL, 40 trials' epochs and ends cost
// the round trips of one flush, against several per row written alone.
TEST(PgResultBatch, ABatchCostsAFewRoundTripsWhateverItsSize) {
  // A server of its own: this test stops and starts it (the ctest run's is shared).
  auto owned = testing::PgServer::start_private();
  auto* pg = owned.get();
  if (!pg) {
    if (std::getenv("CI")) FAIL() << testing::PgServer::why_missing();
    GTEST_SKIP() << testing::PgServer::why_missing();
  }
  PgResultStore store(pg->new_database());
  ExperimentRecord e;
  e.name = "trips";
  e.spec_text = "x";
  const auto exp = store.create_experiment(e);
  std::vector<NewTrial> rows;
  for (int i = 0; i < 80; ++i) rows.push_back({i, "{}", 1u});
  auto ids = store.add_trials(exp, rows);
  for (auto id : ids) ASSERT_TRUE(store.mark_running(id, 1, "w", nlohmann::json::object()));

  // Each way twice, counting the second: statements are prepared by then.
  auto batch_of = [&](std::size_t from) {
    ResultBatch b;
    for (std::size_t i = from; i < from + 20; ++i) {
      for (int ep = 1; ep <= 3; ++ep) b.epochs.push_back({ids[i], 1, at_epoch(ep, 0.1 * ep)});
      b.ends.push_back(end_of(ids[i], 1, TrialStatus::finished, 0.3, 3));
    }
    return b;
  };
  auto one_by_one = [&](const ResultBatch& b) {
    for (const auto& w : b.epochs) ASSERT_TRUE(store.record_epoch(w.trial_id, 1, w.metrics));
    for (const auto& t : b.ends)
      ASSERT_TRUE(store.finish_trial(t.trial_id, 1, t.status, t.metrics, t.error));
  };
  one_by_one(batch_of(0));
  auto before = store.round_trips();
  one_by_one(batch_of(20));
  const auto single = store.round_trips() - before;
  store.record_results(batch_of(40));
  before = store.round_trips();
  const BatchOutcome out = store.record_results(batch_of(60));
  const auto batched = store.round_trips() - before;
  EXPECT_EQ(out.ends, std::vector<bool>(20, true));
  EXPECT_LE(batched, 4) << "BEGIN, the locking SELECT, one statement, COMMIT";
  EXPECT_GE(single, 80 * 4) << "each single write is a transaction of its own";
  EXPECT_EQ(store.trial_counts(exp).finished, 80);
  EXPECT_EQ(store.events_of_type("trial.epoch").size(), 240u);
  std::cout << "round trips for 20 trials x (3 epochs + end): one by one " << single << ", batched "
            << batched << "\n";
}

// The server stopped (pg_ctl stop -m fast) and started again on the same
// port while a store is open: a call made meanwhile waits, reconnecting with
// backoff, and is kept once; with no time to wait it throws
// StoreUnavailableError, and the next call reconnects.
TEST(PgOutage, ACallDuringARestartWaitsForTheServerAndIsKeptOnce) {
  // A server of its own: this test stops and starts it (the ctest run's is shared).
  auto owned = testing::PgServer::start_private();
  auto* pg = owned.get();
  if (!pg) {
    if (std::getenv("CI")) FAIL() << testing::PgServer::why_missing();
    GTEST_SKIP() << testing::PgServer::why_missing();
  }
  const std::string url = pg->new_database();
  StoreOptions patient;
  patient.reconnect_seconds = 60;
  auto store = open_result_store(url, nullptr, patient);
  StoreOptions hasty;
  hasty.reconnect_seconds = 0.2;
  auto quick = open_result_store(url, nullptr, hasty);
  ExperimentRecord e;
  e.name = "outage";
  e.spec_text = "x";
  const auto exp = store->create_experiment(e);
  auto ids = store->add_trials(exp, {{0, "{}", 1u}, {1, "{}", 1u}});
  ASSERT_TRUE(store->mark_running(ids[0], 1, "w"));
  ASSERT_TRUE(store->mark_running(ids[1], 1, "w"));
  ASSERT_EQ(quick->trial_counts(exp).running, 2);

  pg->stop();
  EXPECT_THROW(quick->trial_counts(exp), StoreUnavailableError);
  std::thread restart([&] {
    std::this_thread::sleep_for(std::chrono::seconds(2));
    pg->start();
  });
  ResultBatch b;
  b.epochs = {{ids[0], 1, at_epoch(1, 0.5)}};
  b.ends = {end_of(ids[0], 1, TrialStatus::finished, 0.5, 1)};
  const auto t0 = std::chrono::steady_clock::now();
  BatchOutcome out;
  EXPECT_NO_THROW(out = store->record_results(b));
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  restart.join();
  EXPECT_GE(waited, 1.5) << "the write cannot have reached a stopped server";
  EXPECT_EQ(out.ends, std::vector<bool>{true});
  EXPECT_TRUE(store->finish_trial(ids[1], 1, TrialStatus::finished, {}));

  TrialCounts n = quick->trial_counts(exp);  // reconnects
  EXPECT_EQ(n.finished, 2);
  EXPECT_EQ(n.running, 0);
  EXPECT_EQ(quick->trial(ids[0])->curve.size(), 1u);
  EXPECT_EQ(quick->events_of_type("trial.finished").size(), 2u);
}

}  // namespace
}  // namespace dnnlab::store
