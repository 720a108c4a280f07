// SchedulerFeed on every store backend: a worker-side feed (counts = true)
// and a gateway-side feed (counts = false: another instance on another
// connection to the same store) give the same verdicts on the same stored
// history, and those verdicts are the in-memory schedulers' (sweep/) fed
// every counted trial's full curve; the feed follows new attempts and
// verification, keeps no judged value, and reads only what changed.
#include "experiment/scheduler_feed.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "queue/test_support.hpp"
#include "store/pg_server.hpp"
#include "sweep/scheduler.hpp"

namespace dnnlab::experiment {
namespace {

constexpr std::int64_t kEpochs = 6;

sweep::SweepSpec sweep_with(const std::string& scheduler) {
  sweep::SweepSpec s;
  s.search.metric = "val_acc";
  s.search.mode = "max";
  s.scheduler.type = scheduler;
  s.scheduler.min_epochs = 1;
  s.scheduler.reduction_factor = 2;
  s.scheduler.grace_epochs = 2;
  s.max_epochs = kEpochs;
  return s;
}

store::EpochMetrics acc(std::int64_t epoch, double val_acc) {
  store::EpochMetrics m;
  m.epoch = epoch;
  m.val_acc = val_acc;
  return m;
}

// The rule as the in-memory scheduler states it, on full histories: a fresh
// scheduler fed every counted trial's whole current curve (and the judged
// trial's stored epochs before `epoch`), read from the store by plain
// queries, then asked about the point.
bool reference_verdict(store::ResultStore& st, std::int64_t exp, const sweep::SweepSpec& sweep,
                       std::int64_t trial_id, std::int64_t epoch, double value) {
  auto s = sweep::make_scheduler(sweep);
  store::TrialQuery all;
  all.limit = 0;
  std::int64_t own_index = -1;
  for (const auto& t : st.trials(exp, all)) {
    if (t.attempt == 0) continue;
    const bool own = t.id == trial_id;
    if (own) own_index = t.index;
    if (t.provisional && !own) continue;
    const std::optional<store::TrialRecord> full =
        st.trial(t.id);  // kept: the loop reads its curve
    for (const auto& m : full->curve)
      if (m.val_acc && (!own || m.epoch < epoch)) s->replay(t.index, m.epoch, *m.val_acc);
  }
  return s->on_epoch(own_index, epoch, value) == sweep::Decision::kContinue;
}

// A deterministic spread of accuracies in (0, 1).
double value_of(std::int64_t trial, std::int64_t epoch) {
  std::uint64_t x = static_cast<std::uint64_t>(trial * 7919 + epoch * 104729 + 17);
  x ^= x >> 13;
  x *= 0x9E3779B97F4A7C15ull;
  return 0.05 + 0.9 * static_cast<double>((x >> 11) % 1000) / 1000.0;
}

class SchedulerFeedTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "sqlite") {
      url_ = dir_.url("r.db");
    } else if (auto* pg = testing::PgServer::shared()) {
      url_ = pg->new_database();
    } else {
      if (std::getenv("CI")) FAIL() << testing::PgServer::why_missing();
      GTEST_SKIP() << testing::PgServer::why_missing();
    }
    worker_store_ = store::open_result_store(url_);
    gateway_store_ = store::open_result_store(url_);  // a second connection
    store::ExperimentRecord e;
    e.name = "feed";
    e.spec_text = "x";
    exp_ = worker_store_->create_experiment(e);
  }
  std::vector<std::int64_t> add(int n) {
    std::vector<store::NewTrial> t;
    for (int i = 0; i < n; ++i) t.push_back({next_index_++, "{}", 1});
    return worker_store_->add_trials(exp_, t);
  }
  // Runs attempt `attempt` of the trial and stores `values` as epochs 1...
  void store_curve(std::int64_t id, const std::vector<double>& values, int attempt = 1) {
    ASSERT_TRUE(worker_store_->mark_running(id, attempt, "w" + std::to_string(attempt)));
    for (std::size_t e = 0; e < values.size(); ++e)
      ASSERT_TRUE(worker_store_->record_epoch(id, attempt, acc(std::int64_t(e) + 1, values[e])));
  }
  std::int64_t index_of(std::int64_t id) { return worker_store_->trial(id)->index; }

  testing::TempDir dir_;
  std::string url_;
  std::unique_ptr<store::ResultStore> worker_store_, gateway_store_;
  std::int64_t exp_ = 0;
  std::int64_t next_index_ = 0;
};

// The worker stores its epoch, then asks (counts = true); the gateway's feed
// is asked about the same point (counts = false); both agree with the rule
// on full histories, for every epoch of every probe, ASHA and median alike.
TEST_P(SchedulerFeedTest, WorkerAndGatewayFeedsGiveTheRulesVerdictOnFullHistories) {
  for (const std::string type : {"asha", "median"}) {
    SCOPED_TRACE(type);
    const sweep::SweepSpec sweep = sweep_with(type);
    SchedulerFeed worker(sweep, exp_), gateway(sweep, exp_);
    // A history: 20 finished trials of varying length, 3 of them provisional.
    const auto done = add(20);
    for (std::size_t i = 0; i < done.size(); ++i) {
      std::vector<double> curve;
      for (std::int64_t e = 1; e <= 1 + std::int64_t(i % kEpochs); ++e)
        curve.push_back(value_of(done[i], e));
      store_curve(done[i], curve);
      if (i % 7 == 3) {
        ASSERT_TRUE(worker_store_->set_provisional(done[i], 1, true));
      }
    }
    int stops = 0, goes = 0;
    for (std::int64_t id : add(12)) {
      ASSERT_TRUE(worker_store_->mark_running(id, 1, "w1"));
      for (std::int64_t e = 1; e < kEpochs; ++e) {
        const double v = value_of(id, e);
        ASSERT_TRUE(worker_store_->record_epoch(id, 1, acc(e, v)));
        const EpochPoint at{id, index_of(id), e, kEpochs};
        const bool expected = reference_verdict(*worker_store_, exp_, sweep, id, e, v);
        EXPECT_EQ(worker.verdict(*worker_store_, at, acc(e, v), true), expected)
            << "trial " << id << " epoch " << e;
        EXPECT_EQ(gateway.verdict(*gateway_store_, at, acc(e, v), false), expected)
            << "trial " << id << " epoch " << e;
        (expected ? goes : stops) += 1;
        if (!expected) break;  // pruned: the trial stops here
      }
    }
    EXPECT_GT(stops, 0) << "the history must stop some probes";
    EXPECT_GT(goes, 0) << "and let some go on";
  }
}

// A browser's value at a rung (counts = false, its trial provisional): the
// same verdict from both feeds, and it moves nothing; once verified, its
// stored epochs count (the feeds follow the trial.provisional event).
TEST_P(SchedulerFeedTest, ProvisionalEpochsCountOnlyOnceVerified) {
  const sweep::SweepSpec sweep = sweep_with("asha");  // eta 2, rungs 1, 2, 4
  SchedulerFeed worker(sweep, exp_), gateway(sweep, exp_);
  const auto ids = add(4);
  store_curve(ids[0], {0.50});
  // The browser's trial: provisional from its start, its epoch stored.
  ASSERT_TRUE(worker_store_->mark_running(ids[1], 1, "browser"));
  ASSERT_TRUE(worker_store_->set_provisional(ids[1], 1, true));
  ASSERT_TRUE(worker_store_->record_epoch(ids[1], 1, acc(1, 0.90)));
  EXPECT_TRUE(gateway.verdict(*gateway_store_, {ids[1], 1, 1, kEpochs}, acc(1, 0.90), false));
  EXPECT_TRUE(worker.verdict(*worker_store_, {ids[1], 1, 1, kEpochs}, acc(1, 0.90), false));
  // A native trial at 0.60: against 0.50 only (the browser's 0.90 does not
  // count), it is the best of two and goes on.
  ASSERT_TRUE(worker_store_->mark_running(ids[2], 1, "w1"));
  ASSERT_TRUE(worker_store_->record_epoch(ids[2], 1, acc(1, 0.60)));
  EXPECT_TRUE(worker.verdict(*worker_store_, {ids[2], 2, 1, kEpochs}, acc(1, 0.60), true));
  EXPECT_TRUE(gateway.verdict(*gateway_store_, {ids[2], 2, 1, kEpochs}, acc(1, 0.60), false));
  // Verified: 0.90 counts now. A native 0.55 is third of four (0.90, 0.60,
  // 0.50 and itself; 4 / 2 = 2 go on): stopped, on both feeds.
  ASSERT_TRUE(gateway_store_->set_provisional(ids[1], 1, false));
  ASSERT_TRUE(worker_store_->mark_running(ids[3], 1, "w1"));
  ASSERT_TRUE(worker_store_->record_epoch(ids[3], 1, acc(1, 0.55)));
  EXPECT_FALSE(worker.verdict(*worker_store_, {ids[3], 3, 1, kEpochs}, acc(1, 0.55), true));
  EXPECT_FALSE(gateway.verdict(*gateway_store_, {ids[3], 3, 1, kEpochs}, acc(1, 0.55), false));
  EXPECT_FALSE(reference_verdict(*worker_store_, exp_, sweep, ids[3], 1, 0.55));
}

// A value judged with counts = false is not kept, nor its verdict: a later
// verdict is as if it was never asked.
TEST_P(SchedulerFeedTest, AJudgedValueIsNotKept) {
  const sweep::SweepSpec sweep = sweep_with("asha");
  SchedulerFeed gateway(sweep, exp_), fresh(sweep, exp_);
  const auto ids = add(3);
  store_curve(ids[0], {0.50});
  // Never stored: a browser's 0.99 for trial 1, judged and dropped.
  EXPECT_TRUE(gateway.verdict(*gateway_store_, {ids[1], 1, 1, kEpochs}, acc(1, 0.99), false));
  // 0.60 against 0.50 alone: the best of two, it goes on (against 0.99 kept it would be second).
  ASSERT_TRUE(worker_store_->mark_running(ids[2], 1, "w1"));
  ASSERT_TRUE(worker_store_->record_epoch(ids[2], 1, acc(1, 0.60)));
  EXPECT_TRUE(gateway.verdict(*gateway_store_, {ids[2], 2, 1, kEpochs}, acc(1, 0.60), false));
  EXPECT_TRUE(fresh.verdict(*worker_store_, {ids[2], 2, 1, kEpochs}, acc(1, 0.60), true));
  // Nor is its verdict: trial 1 reissued (an abandoned ticket) is judged on
  // its new value, 0.10 against {0.50, 0.60}.
  EXPECT_FALSE(gateway.verdict(*gateway_store_, {ids[1], 1, 1, kEpochs}, acc(1, 0.10), false));
}

// The median rule compares with the others' running averages over their full
// curves, whichever epochs a feed was asked about before: a fresh feed asked
// only about epoch 3 stops a trial whose best (0.40) is below the others'
// averages (0.50), though their epoch-3 values alone (0.10) are below it.
TEST_P(SchedulerFeedTest, MedianAveragesFullHistories) {
  const sweep::SweepSpec sweep = sweep_with("median");  // grace 2
  const auto ids = add(4);
  for (int i = 0; i < 3; ++i) store_curve(ids[i], {0.80, 0.60, 0.10});
  ASSERT_TRUE(worker_store_->mark_running(ids[3], 1, "w1"));
  for (std::int64_t e = 1; e <= 3; ++e)
    ASSERT_TRUE(worker_store_->record_epoch(ids[3], 1, acc(e, 0.40)));
  SchedulerFeed worker(sweep, exp_), gateway(sweep, exp_);
  EXPECT_FALSE(worker.verdict(*worker_store_, {ids[3], 3, 3, kEpochs}, acc(3, 0.40), true));
  EXPECT_FALSE(gateway.verdict(*gateway_store_, {ids[3], 3, 3, kEpochs}, acc(3, 0.40), false));
  // With a best of 0.55 earlier in its own curve it goes on.
  const auto more = add(1);
  ASSERT_TRUE(worker_store_->mark_running(more[0], 1, "w1"));
  ASSERT_TRUE(worker_store_->record_epoch(more[0], 1, acc(1, 0.55)));
  ASSERT_TRUE(worker_store_->record_epoch(more[0], 1, acc(2, 0.20)));
  EXPECT_TRUE(gateway.verdict(*gateway_store_, {more[0], 4, 3, kEpochs}, acc(3, 0.20), false));
  EXPECT_TRUE(reference_verdict(*worker_store_, exp_, sweep, more[0], 3, 0.20));
}

// A new attempt's start drops the old attempt's epochs from the history, as
// epochs_for does.
TEST_P(SchedulerFeedTest, ANewAttemptReplacesTheOldOnesEpochs) {
  const sweep::SweepSpec sweep = sweep_with("asha");
  SchedulerFeed worker(sweep, exp_);
  const auto ids = add(3);
  store_curve(ids[0], {0.95});
  ASSERT_TRUE(worker_store_->mark_running(ids[1], 1, "w1"));
  ASSERT_TRUE(worker_store_->record_epoch(ids[1], 1, acc(1, 0.70)));
  // 0.70 is second of two: 2 / 2 = 1 goes on, so it stops.
  EXPECT_FALSE(worker.verdict(*worker_store_, {ids[1], 1, 1, kEpochs}, acc(1, 0.70), true));
  // Trial 0 runs again (attempt 2) and has no epoch yet: 0.80 now leads alone.
  ASSERT_TRUE(worker_store_->mark_running(ids[0], 2, "w2"));
  ASSERT_TRUE(worker_store_->mark_running(ids[2], 1, "w1"));
  ASSERT_TRUE(worker_store_->record_epoch(ids[2], 1, acc(1, 0.80)));
  EXPECT_TRUE(worker.verdict(*worker_store_, {ids[2], 2, 1, kEpochs}, acc(1, 0.80), true));
  SchedulerFeed fresh(sweep, exp_);
  EXPECT_TRUE(fresh.verdict(*gateway_store_, {ids[2], 2, 1, kEpochs}, acc(1, 0.80), false));
}

// Idempotent per (trial, epoch) for counted values: a repeat gets the first
// answer, whatever was stored since. The last epoch is never stopped; FIFO
// never stops.
TEST_P(SchedulerFeedTest, RepeatsAndTheLastEpoch) {
  const sweep::SweepSpec sweep = sweep_with("asha");
  SchedulerFeed worker(sweep, exp_);
  const auto ids = add(3);
  store_curve(ids[0], {0.50});
  ASSERT_TRUE(worker_store_->mark_running(ids[1], 1, "w1"));
  ASSERT_TRUE(worker_store_->record_epoch(ids[1], 1, acc(1, 0.60)));
  EXPECT_TRUE(worker.verdict(*worker_store_, {ids[1], 1, 1, kEpochs}, acc(1, 0.60), true));
  store_curve(ids[2], {0.90});
  EXPECT_TRUE(worker.verdict(*worker_store_, {ids[1], 1, 1, kEpochs}, acc(1, 0.60), true));
  SchedulerFeed fresh(sweep, exp_);
  EXPECT_FALSE(fresh.verdict(*worker_store_, {ids[1], 1, 1, kEpochs}, acc(1, 0.60), true))
      << "a feed that never answered reads the history as it is now";
  EXPECT_TRUE(
      fresh.verdict(*worker_store_, {ids[1], 1, kEpochs, kEpochs}, acc(kEpochs, 0.0), true));
  SchedulerFeed fifo(sweep_with("fifo"), exp_);
  EXPECT_TRUE(fifo.verdict(*worker_store_, {ids[1], 1, 1, kEpochs}, acc(1, 0.0), true));
}

// Incremental: after the first read, a catch-up reads only the trials that
// events since name, not the experiment's others.
TEST_P(SchedulerFeedTest, CatchUpReadsOnlyWhatChanged) {
  SchedulerFeed feed(sweep_with("median"), exp_);
  const auto ids = add(30);
  for (std::int64_t id : ids) store_curve(id, {0.5, 0.5});
  EXPECT_EQ(feed.catch_up(*gateway_store_), ids.size());
  EXPECT_EQ(feed.catch_up(*gateway_store_), 0u);
  ASSERT_TRUE(worker_store_->record_epoch(ids[4], 1, acc(3, 0.7)));
  worker_store_->append_event("worker.joined", {{"agent", "x"}});  // not a trial's
  EXPECT_EQ(feed.catch_up(*gateway_store_), 1u);
  ASSERT_TRUE(worker_store_->set_provisional(ids[5], 1, true));
  ASSERT_TRUE(worker_store_->mark_running(ids[6], 2, "w2"));
  EXPECT_EQ(feed.catch_up(*gateway_store_), 2u);
  // Another experiment's epochs are not read.
  store::ExperimentRecord other;
  other.name = "other";
  other.spec_text = "y";
  const auto other_exp = worker_store_->create_experiment(other);
  const auto other_ids = worker_store_->add_trials(other_exp, {{0, "{}", 1}});
  ASSERT_TRUE(worker_store_->mark_running(other_ids[0], 1, "w1"));
  ASSERT_TRUE(worker_store_->record_epoch(other_ids[0], 1, acc(1, 0.9)));
  EXPECT_EQ(feed.catch_up(*gateway_store_), 0u);
}

INSTANTIATE_TEST_SUITE_P(Stores, SchedulerFeedTest,
                         ::testing::Values(std::string("sqlite"), std::string("postgres")),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace dnnlab::experiment
