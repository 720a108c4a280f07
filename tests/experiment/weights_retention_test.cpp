// The weights retention rule (experiment/weights_retention.hpp): the best K
// finished trials by the experiment's objective plus the pinned ones keep
// their files, during the run and not only at its end; and the lease
// service offering a finished trial's weights once its end counted.
#include "experiment/weights_retention.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "experiment/backends.hpp"
#include "experiment/coordinator.hpp"
#include "experiment/lease_service.hpp"
#include "queue/test_support.hpp"

namespace dnnlab::weights_retention_test {
namespace {

using experiment::WeightsRetention;
using experiment::WeightsRule;

struct Store {
  dnnlab::testing::TempDir dir;
  std::unique_ptr<store::ResultStore> s = store::open_result_store(dir.url("r.db"));
  std::int64_t exp = 0;
  std::vector<std::int64_t> ids;

  explicit Store(int n) {
    store::ExperimentRecord e;
    e.name = "keep";
    e.spec_text = "x";
    exp = s->create_experiment(e);
    std::vector<store::NewTrial> t;
    for (int i = 0; i < n; ++i) t.push_back({i, "{}", static_cast<std::uint64_t>(i)});
    ids = s->add_trials(exp, t);
  }
  // Ends trial i with this val_acc and val_loss = 1 - val_acc.
  store::TrialMetrics finish(int i, std::optional<double> val_acc) {
    EXPECT_TRUE(s->mark_running(ids[i], 1, "w"));
    store::TrialMetrics m;
    m.val_acc = val_acc;
    if (val_acc) m.val_loss = 1 - *val_acc;
    m.epochs_done = 1;
    EXPECT_TRUE(s->finish_trial(ids[i], 1, store::TrialStatus::finished, m));
    return m;
  }
  std::vector<std::int64_t> kept() {
    std::vector<std::int64_t> k;
    for (const auto& w : s->weights_of(exp)) k.push_back(w.trial_id);
    return k;
  }
};

WeightsRule rule(std::int64_t k, std::string metric = "val_acc", bool maximize = true) {
  WeightsRule r;
  r.keep = k;
  r.metric = std::move(metric);
  r.maximize = maximize;
  return r;
}

TEST(WeightsRetention, TheBestKAreKeptAtEveryStepWhateverTheOrder) {
  constexpr int kTrials = 200, kKeep = 5;
  Store st(kTrials);
  WeightsRetention keep(*st.s, rule(kKeep));
  std::vector<int> order(kTrials);
  for (int i = 0; i < kTrials; ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), std::mt19937(7));
  std::vector<std::pair<double, std::int64_t>> seen;  // (val_acc, id) finished so far
  for (int i : order) {
    const double acc = static_cast<double>((i * 37) % kTrials) / kTrials;
    const store::TrialMetrics m = st.finish(i, acc);
    const bool could = keep.could_keep(st.ids[i], st.exp, m);
    const bool kept = keep.offer(st.ids[i], "file " + std::to_string(i));
    EXPECT_EQ(could, kept) << "the cheap check agrees with the rule";
    seen.emplace_back(-acc, st.ids[i]);
    std::sort(seen.begin(), seen.end());
    std::vector<std::int64_t> best;
    for (std::size_t j = 0; j < seen.size() && j < kKeep; ++j) best.push_back(seen[j].second);
    std::sort(best.begin(), best.end());
    ASSERT_EQ(st.kept(), best) << "after " << seen.size() << " trials";
  }
  EXPECT_EQ(st.s->weights(st.kept()[0])->bytes.substr(0, 5), "file ");
}

TEST(WeightsRetention, PinnedTrialsAreKeptBesideTheBestKUntilUnpinned) {
  Store st(6);
  WeightsRetention keep(*st.s, rule(2));
  st.s->set_pinned(st.ids[0], true);
  st.finish(0, 0.1);  // the worst, pinned
  EXPECT_TRUE(keep.could_keep(st.ids[0], st.exp, st.s->trial(st.ids[0])->metrics));
  EXPECT_TRUE(keep.offer(st.ids[0], "p"));
  for (int i = 1; i < 6; ++i) {
    st.finish(i, 0.1 + 0.1 * i);
    keep.offer(st.ids[i], "f");
  }
  EXPECT_EQ(st.kept(), (std::vector<std::int64_t>{st.ids[0], st.ids[4], st.ids[5]}));
  st.s->set_pinned(st.ids[0], false);
  EXPECT_EQ(keep.prune(st.exp), 1) << "the experiment's end drops the unpinned one";
  EXPECT_EQ(st.kept(), (std::vector<std::int64_t>{st.ids[4], st.ids[5]}));
}

TEST(WeightsRetention, LossesAreMinimisedAndZeroKeepsOnlyPinnedTrials) {
  Store st(4);
  WeightsRetention by_loss(*st.s, rule(1, "val_loss", false));
  st.finish(0, 0.9);  // val_loss 0.1: the best
  st.finish(1, 0.2);  // val_loss 0.8
  EXPECT_TRUE(by_loss.offer(st.ids[1], "b"));
  EXPECT_TRUE(by_loss.offer(st.ids[0], "a"));
  EXPECT_EQ(st.kept(), (std::vector<std::int64_t>{st.ids[0]}));

  WeightsRetention none(*st.s, rule(0));
  EXPECT_EQ(none.prune(st.exp), 1);
  st.finish(2, 0.99);
  EXPECT_FALSE(none.could_keep(st.ids[2], st.exp, st.s->trial(st.ids[2])->metrics));
  EXPECT_FALSE(none.offer(st.ids[2], "c"));
  st.s->set_pinned(st.ids[3], true);
  st.finish(3, std::nullopt);  // no metric at all, but pinned
  EXPECT_TRUE(none.offer(st.ids[3], "d"));
  EXPECT_EQ(st.kept(), (std::vector<std::int64_t>{st.ids[3]}));
}

TEST(WeightsRetention, ATrialWithoutTheMetricIsNotKept) {
  Store st(2);
  WeightsRetention keep(*st.s, rule(10));
  st.finish(0, std::nullopt);
  EXPECT_FALSE(keep.offer(st.ids[0], "x"));
  EXPECT_TRUE(st.kept().empty());
}

constexpr const char* kSweep = R"(name: keep2
template:
  data: {dataset: synthetic, limit_train: 64, validation: 64}
  model:
    layers:
      - dense: ${width}
      - dense: 10
  train:
    epochs: 1
    batch_size: 64
    optimizer: {type: sgd, lr: 0.1}
search:
  method: grid
  keep_weights: 1
  parameters:
    width: [4, 8, 16]
)";

TEST(WeightsRetention, TheLeaseServiceOffersAFinishedTrialsWeightsOnceItsEndCounted) {
  dnnlab::testing::TempDir dir;
  const std::string url = dir.url("dnnlab.db");
  experiment::Backends b = experiment::open_backends(url, url);
  const std::int64_t exp = experiment::Coordinator::submit(*b.store, *b.queue, kSweep, "k.yaml");
  experiment::Coordinator(*b.store, *b.queue, exp).tick();
  experiment::Catalogue cat(*b.store);
  experiment::LeaseService svc(*b.store, *b.queue, cat, {});
  std::vector<std::int64_t> ids;
  for (double acc : {0.5, 0.7, 0.6}) {
    experiment::TrialLease l;
    ASSERT_EQ(svc.lease(exp, "w", 30, l), experiment::LeaseService::Got::kLeased);
    ASSERT_TRUE(svc.start(l, nlohmann::json::object()));
    store::TrialMetrics m;
    m.val_acc = acc;
    m.epochs_done = 1;
    ids.push_back(l.trial.id);
    const bool wants = svc.wants_weights(l, m);
    EXPECT_EQ(wants, acc != 0.6) << "K = 1: 0.6 cannot beat the 0.7 kept";
    svc.finish(std::move(l), store::TrialStatus::finished, m, {}, false,
               wants ? "weights " + std::to_string(acc) : std::string());
    EXPECT_TRUE(b.store->weights_of(exp).size() <= 1);
    svc.commit();
  }
  const auto kept = b.store->weights_of(exp);
  ASSERT_EQ(kept.size(), 1U);
  EXPECT_EQ(kept[0].trial_id, ids[1]);
  EXPECT_EQ(b.store->weights(ids[1])->bytes, "weights " + std::to_string(0.7));
}

TEST(WeightsRetention, ReopeningAWorkersTrialsDropsTheirWeights) {
  dnnlab::testing::TempDir dir;
  const std::string url = dir.url("dnnlab.db");
  experiment::Backends b = experiment::open_backends(url, url);
  const std::int64_t exp = experiment::Coordinator::submit(*b.store, *b.queue, kSweep, "k.yaml");
  experiment::Coordinator(*b.store, *b.queue, exp).tick();
  experiment::Catalogue cat(*b.store);
  experiment::LeaseService svc(*b.store, *b.queue, cat, {});
  experiment::TrialLease l;
  ASSERT_EQ(svc.lease(exp, "liar", 30, l), experiment::LeaseService::Got::kLeased);
  ASSERT_TRUE(svc.start(l, nlohmann::json::object()));
  const std::int64_t id = l.trial.id;
  store::TrialMetrics m;
  m.val_acc = 0.9;
  m.epochs_done = 1;
  svc.finish(std::move(l), store::TrialStatus::finished, m, {}, false, "w");
  svc.commit();
  ASSERT_TRUE(b.store->weights(id));
  EXPECT_EQ(svc.reopen_trials_of({"liar"}), 1);
  EXPECT_FALSE(b.store->weights(id)) << "a result not trusted any more keeps no weights";
}

TEST(WeightsRetention, KeepWeightsIsReadFromTheSweepAndBounded) {
  EXPECT_EQ(sweep::parse_sweep(kSweep, "k.yaml").search.keep_weights, 1);
  std::string no_key = kSweep;
  no_key.erase(no_key.find("  keep_weights: 1\n"), 18);
  EXPECT_EQ(sweep::parse_sweep(no_key, "k.yaml").search.keep_weights, 10) << "the default";
  std::string too_many = kSweep;
  too_many.replace(too_many.find("keep_weights: 1"), 15, "keep_weights: 1001");
  EXPECT_THROW(sweep::parse_sweep(too_many, "k.yaml"), std::exception);
}

}  // namespace
}  // namespace dnnlab::weights_retention_test
