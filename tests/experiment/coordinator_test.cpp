// The coordinator over a real queue and store, with the workers played by
// the test: how many trials it keeps out (search.max_concurrent), what it
// plans, and how an experiment ends.
#include "experiment/coordinator.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <ostream>
#include <set>
#include <string>
#include <thread>

#include "db/task_codec.hpp"
#include "experiment/backends.hpp"
#include "queue/test_support.hpp"

namespace dnnlab {
namespace {

std::string sweep_yaml(const std::string& method, const std::string& extra_search,
                       const std::string& parameters) {
  return R"(name: coord
template:
  data: {dataset: synthetic, limit_train: 64, validation: 64}
  model:
    layers:
      - dense: ${w}
      - dense: 10
  train:
    epochs: 1
    batch_size: 64
    optimizer: {type: sgd, lr: ${lr}}
search:
  method: )" +
         method + "\n" + extra_search + "  parameters:\n" + parameters;
}

const char* kTenPoints = "    w: [4, 8, 16, 32, 64]\n    lr: [0.1, 0.01]\n";

// Plays the workers: ends every queued trial of `exp` (finished, or failed
// when `fail`); returns how many.
int end_queued(experiment::Backends& b, std::int64_t exp, bool fail = false) {
  int n = 0;
  while (auto lease = b.queue->lease(db::queue_name(exp), "w", 30)) {
    const auto task = db::decode_task(lease->payload);
    EXPECT_TRUE(b.store->mark_running(task.trial_id, lease->attempt, "w"));
    store::TrialMetrics m;
    if (!fail) m.val_acc = 0.5;
    EXPECT_TRUE(b.store->finish_trial(
        task.trial_id, lease->attempt,
        fail ? store::TrialStatus::failed : store::TrialStatus::finished, m, fail ? "boom" : ""));
    EXPECT_TRUE(b.queue->ack(*lease));
    ++n;
  }
  return n;
}

struct MaxConcurrentCase {
  std::string method;
  int max_concurrent;
};
void PrintTo(const MaxConcurrentCase& c, std::ostream* os) {
  *os << c.method << " max_concurrent " << c.max_concurrent;
}

class CoordinatorMaxConcurrent : public ::testing::TestWithParam<MaxConcurrentCase> {};

// Used to stall for good: the refill rule for grid and random ("only in
// batches of kBacklog / 2") left no room under any max_concurrent.
TEST_P(CoordinatorMaxConcurrent, KeepsAtMostThatManyOutAndRunsEveryTrial) {
  const auto [method, limit] = GetParam();
  testing::TempDir dir;
  const std::string url = dir.url("dnnlab.db");
  auto b = experiment::open_backends(url, url);
  const std::string extra = (method == "grid" ? "" : "  budget: 10\n") +
                            std::string("  max_concurrent: ") + std::to_string(limit) + "\n";
  const auto exp = experiment::Coordinator::submit(
      *b.store, *b.queue, sweep_yaml(method, extra, kTenPoints), "coord.yaml");
  experiment::Coordinator coord(*b.store, *b.queue, exp);
  experiment::Progress p;
  int ticks = 0;
  for (; ticks < 100; ++ticks) {
    p = coord.tick(/*in_flight=*/4);
    EXPECT_EQ(p.planned, 10);
    const auto out = p.counts.queued + p.counts.running;
    EXPECT_LE(out, limit);
    if (p.done) break;
    ASSERT_GT(out, 0) << "tick " << ticks << ": nothing queued, nothing running, not done";
    EXPECT_EQ(out, std::min<std::int64_t>(limit, 10 - p.counts.finished));
    end_queued(b, exp);
  }
  EXPECT_TRUE(p.done);
  EXPECT_EQ(p.counts.finished, 10);
  EXPECT_EQ(p.counts.total(), 10);
  EXPECT_EQ(b.store->experiment(exp)->status, store::ExperimentStatus::finished);
}

INSTANTIATE_TEST_SUITE_P(
    GridAndRandom, CoordinatorMaxConcurrent,
    ::testing::Values(MaxConcurrentCase{"grid", 1}, MaxConcurrentCase{"grid", 4},
                      MaxConcurrentCase{"grid", 10}, MaxConcurrentCase{"grid", 25},
                      MaxConcurrentCase{"random", 1}, MaxConcurrentCase{"random", 3},
                      MaxConcurrentCase{"random", 10}, MaxConcurrentCase{"random", 25}),
    [](const auto& info) {
      return info.param.method + "_" + std::to_string(info.param.max_concurrent);
    });

TEST(Coordinator, RandomSearchOverASmallSpacePlansOnlyItsPoints) {
  testing::TempDir dir;
  const std::string url = dir.url("dnnlab.db");
  auto b = experiment::open_backends(url, url);
  const auto exp = experiment::Coordinator::submit(
      *b.store, *b.queue,
      sweep_yaml("random", "  budget: 10\n", "    w: [4, 8]\n    lr: [0.1, 0.01]\n"), "coord.yaml");
  experiment::Coordinator coord(*b.store, *b.queue, exp);
  experiment::Progress p = coord.tick();
  EXPECT_EQ(p.planned, 4);
  EXPECT_EQ(p.counts.queued, 4);
  end_queued(b, exp);
  p = coord.tick();
  EXPECT_TRUE(p.done);
  EXPECT_EQ(p.planned, 4);
  EXPECT_EQ(p.counts.finished, 4);
}

// A task carries its trial's values, so a worker need not read the trial
// from the store before running it (two round trips on a server store).
TEST(Coordinator, TasksCarryTheTrialsConfigAndSeed) {
  testing::TempDir dir;
  const std::string url = dir.url("dnnlab.db");
  auto b = experiment::open_backends(url, url);
  const auto exp = experiment::Coordinator::submit(
      *b.store, *b.queue, sweep_yaml("random", "  budget: 6\n", kTenPoints), "coord.yaml");
  experiment::Coordinator coord(*b.store, *b.queue, exp);
  coord.tick();
  int seen = 0;
  while (auto lease = b.queue->lease(db::queue_name(exp), "w", 30)) {
    const auto task = db::decode_task(lease->payload);
    const auto trial = b.store->trial(task.trial_id);
    ASSERT_TRUE(trial);
    EXPECT_EQ(task.index, trial->index);
    EXPECT_EQ(nlohmann::json::parse(task.config_json), nlohmann::json::parse(trial->config_json));
    EXPECT_EQ(task.seed, trial->seed);
    ++seen;
  }
  EXPECT_EQ(seen, 6);
}

TEST(TaskCodec, ValuesRoundTripAndABadSeedIsNamed) {
  db::TrialTask t{7, 42, 3, 2, R"({"lr":0.012345678901234567,"w":16})", 18446744073709551615u};
  const db::TrialTask back = db::decode_task(db::encode_task(t));
  EXPECT_EQ(back.experiment_id, 7);
  EXPECT_EQ(back.trial_id, 42);
  EXPECT_EQ(back.attempt_base, 2);
  EXPECT_EQ(nlohmann::json::parse(back.config_json), nlohmann::json::parse(t.config_json));
  EXPECT_EQ(nlohmann::json::parse(back.config_json)["lr"].get<double>(), 0.012345678901234567);
  EXPECT_EQ(back.seed, t.seed);
  EXPECT_TRUE(db::decode_task(db::encode_task({7, 42, 3, 0, {}, 0})).config_json.empty());
  try {
    db::decode_task(R"({"v":1,"experiment":1,"trial":2,"index":3,"config":{},"seed":-1})");
    ADD_FAILURE() << "a negative seed was accepted";
  } catch (const db::ProtocolError& e) {
    EXPECT_NE(std::string(e.what()).find("'seed'"), std::string::npos) << e.what();
  }
}

TEST(Coordinator, AnExperimentWhoseEveryTrialFailedEndsFailed) {
  testing::TempDir dir;
  const std::string url = dir.url("dnnlab.db");
  auto b = experiment::open_backends(url, url);
  const auto exp = experiment::Coordinator::submit(*b.store, *b.queue,
                                                   sweep_yaml("grid", "", kTenPoints), "c.yaml");
  experiment::Coordinator coord(*b.store, *b.queue, exp);
  coord.tick();
  EXPECT_EQ(end_queued(b, exp, /*fail=*/true), 10);
  EXPECT_TRUE(coord.tick().done);
  EXPECT_EQ(b.store->experiment(exp)->status, store::ExperimentStatus::failed);
  EXPECT_EQ(b.store->events_since(0, 1000).back().type, "experiment.failed");
}

TEST(Coordinator, OneTrialThatFinishedIsEnoughToFinish) {
  testing::TempDir dir;
  const std::string url = dir.url("dnnlab.db");
  auto b = experiment::open_backends(url, url);
  const auto exp = experiment::Coordinator::submit(
      *b.store, *b.queue, sweep_yaml("grid", "  max_concurrent: 1\n", kTenPoints), "c.yaml");
  experiment::Coordinator coord(*b.store, *b.queue, exp);
  coord.tick();
  EXPECT_EQ(end_queued(b, exp, /*fail=*/false), 1);
  for (int i = 0; i < 20 && !coord.tick().done; ++i) end_queued(b, exp, /*fail=*/true);
  const auto c = b.store->trial_counts(exp);
  EXPECT_EQ(c.finished, 1);
  EXPECT_EQ(c.failed, 9);
  EXPECT_EQ(b.store->experiment(exp)->status, store::ExperimentStatus::finished);
}

// The same sweep submitted again: kReuseIfSame (`dnnlab run`) returns the
// experiment unless it was cancelled, kResumeIfSame only while it runs,
// kNew never; a changed sweep text is another experiment.
TEST(Coordinator, SubmittingTheSameSweepAgainFollowsTheMode) {
  using experiment::SubmitMode;
  testing::TempDir dir;
  const std::string url = dir.url("dnnlab.db");
  auto b = experiment::open_backends(url, url);
  const std::string text = sweep_yaml("grid", "", kTenPoints);
  auto submit = [&](SubmitMode m, const std::string& t) {
    return experiment::Coordinator::submit(*b.store, *b.queue, t, "c.yaml", m);
  };
  const auto exp = submit(SubmitMode::kReuseIfSame, text);
  EXPECT_EQ(submit(SubmitMode::kReuseIfSame, text), exp);  // running: resumed
  EXPECT_EQ(submit(SubmitMode::kResumeIfSame, text), exp);
  {
    experiment::Coordinator coord(*b.store, *b.queue, exp);
    coord.tick();
    EXPECT_EQ(end_queued(b, exp), 10);
    EXPECT_TRUE(coord.tick().done);
  }
  ASSERT_EQ(b.store->experiment(exp)->status, store::ExperimentStatus::finished);
  EXPECT_EQ(submit(SubmitMode::kReuseIfSame, text), exp);  // finished: shown, not retrained
  EXPECT_EQ(b.store->experiments().size(), 1u);
  std::string changed = text;
  changed.replace(changed.find("epochs: 1"), 9, "epochs: 2");
  EXPECT_NE(submit(SubmitMode::kReuseIfSame, changed), exp);
  const auto resumed = submit(SubmitMode::kResumeIfSame, text);  // finished: another
  EXPECT_NE(resumed, exp);
  const auto fresh = submit(SubmitMode::kNew, text);
  EXPECT_NE(fresh, resumed);
  experiment::Coordinator(*b.store, *b.queue, fresh).cancel();
  const auto after_cancel = submit(SubmitMode::kReuseIfSame, text);  // cancelled: another
  EXPECT_NE(after_cancel, fresh);
  EXPECT_NE(after_cancel, exp);
  EXPECT_EQ(b.store->experiments().size(), 5u);
}

// A coordinator killed between storing trials and publishing their tasks:
// the queue cannot say what it holds, so the next one republishes the
// queued trials above the store's published mark, and nothing below it.
TEST(Coordinator, RecoveryRepublishesWhatTheStoreDoesNotKnowWasPublished) {
  testing::TempDir dir;
  auto b = experiment::open_backends(dir.url("q.db"), dir.url("s.db"));  // no shared commit
  const auto exp = experiment::Coordinator::submit(
      *b.store, *b.queue, sweep_yaml("grid", "", kTenPoints), "recover.yaml");
  std::vector<store::NewTrial> rows;
  for (int i = 0; i < 4; ++i) rows.push_back({i, "{\"w\": 4, \"lr\": 0.1}", 1u + i});
  const auto ids = b.store->add_trials(exp, rows);
  // Tasks of trials 0 and 1 were published and marked; 2 and 3 were lost.
  for (int i = 0; i < 2; ++i)
    b.queue->publish(db::queue_name(exp), db::encode_task({exp, ids[i], i, 0, {}, 0}));
  b.store->set_published(exp, 1);
  {
    experiment::Coordinator c(*b.store, *b.queue, exp);
    EXPECT_EQ(b.queue->waiting(db::queue_name(exp)), 4) << "2 and 3 republished, once";
    EXPECT_EQ(b.store->experiment(exp)->published_index, 3);
  }
  experiment::Coordinator again(*b.store, *b.queue, exp);
  EXPECT_EQ(b.queue->waiting(db::queue_name(exp)), 4) << "nothing republished twice";
  std::set<std::int64_t> seen;
  while (auto lease = b.queue->lease(db::queue_name(exp), "w", 30))
    seen.insert(db::decode_task(lease->payload).trial_id);
  EXPECT_EQ(seen, std::set<std::int64_t>(ids.begin(), ids.end()));
}

TEST(CoordinatorLease, TheStoreGivesAnExperimentToOneHolderAtATime) {
  testing::TempDir dir;
  auto store = store::open_result_store(dir.url("dnnlab.db"));
  store::ExperimentRecord e;
  e.name = "x";
  const auto exp = store->create_experiment(e);
  EXPECT_FALSE(store->coordinator(exp));
  EXPECT_TRUE(store->acquire_coordinator(exp, "a", 30));
  EXPECT_TRUE(store->acquire_coordinator(exp, "a", 30));  // renewed
  EXPECT_FALSE(store->acquire_coordinator(exp, "b", 30));
  EXPECT_EQ(store->coordinator(exp), "a");
  store->release_coordinator(exp, "b");  // not b's: nothing changes
  EXPECT_EQ(store->coordinator(exp), "a");
  store->release_coordinator(exp, "a");
  EXPECT_TRUE(store->acquire_coordinator(exp, "b", 0.05));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // b dies: its lease runs out
  EXPECT_FALSE(store->coordinator(exp));
  EXPECT_TRUE(store->acquire_coordinator(exp, "a", 30));
  EXPECT_THROW(store->acquire_coordinator(exp + 1, "a", 30), std::invalid_argument);
  EXPECT_THROW(store->acquire_coordinator(exp, "", 30), std::invalid_argument);
  EXPECT_THROW(store->acquire_coordinator(exp, "a", 0), std::invalid_argument);
}

// Two coordinators of one TPE sweep (two `dnnlab run` of it on one store)
// used to issue the same indexes: "trials[0].index 4 already exists".
TEST(CoordinatorLease, ASecondCoordinatorOnlyReportsUntilTheFirstStops) {
  testing::TempDir dir;
  const std::string url = dir.url("dnnlab.db");
  auto b = experiment::open_backends(url, url);
  const std::string yaml = sweep_yaml(
      "tpe", "  budget: 10\n", "    w: {int: [4, 64]}\n    lr: {loguniform: [0.001, 1.0]}\n");
  const auto exp = experiment::Coordinator::submit(*b.store, *b.queue, yaml, "tpe.yaml");
  auto first = std::make_unique<experiment::Coordinator>(*b.store, *b.queue, exp, "first");
  experiment::Coordinator second(*b.store, *b.queue, exp, "second");
  EXPECT_EQ(first->tick(4).counts.queued, 4);
  experiment::Progress p = second.tick(4);
  EXPECT_FALSE(p.coordinating);
  EXPECT_EQ(p.coordinator, "first");
  EXPECT_FALSE(p.done);
  EXPECT_EQ(p.counts.queued, 4);
  EXPECT_EQ(p.planned, 10);
  end_queued(b, exp);
  EXPECT_TRUE(first->tick(4).coordinating);
  EXPECT_FALSE(second.tick(4).coordinating);
  EXPECT_EQ(b.store->trial_counts(exp).total(), 8);

  first.reset();  // stops: the second takes over where it stopped
  for (int i = 0; i < 20 && !(p = second.tick(4)).done; ++i) {
    EXPECT_TRUE(p.coordinating);
    end_queued(b, exp);
  }
  EXPECT_TRUE(p.done);
  store::TrialQuery all;
  all.limit = 0;
  std::set<std::int64_t> indexes;
  for (const auto& t : b.store->trials(exp, all)) indexes.insert(t.index);
  EXPECT_EQ(indexes.size(), 10u);
  EXPECT_EQ(*indexes.rbegin(), 9);
  EXPECT_EQ(b.store->experiment(exp)->status, store::ExperimentStatus::finished);
}

TEST(CoordinatorLease, AKilledCoordinatorsExperimentIsTakenOverWhenItsLeaseExpires) {
  testing::TempDir dir;
  const std::string url = dir.url("dnnlab.db");
  auto b = experiment::open_backends(url, url);
  const auto exp = experiment::Coordinator::submit(*b.store, *b.queue,
                                                   sweep_yaml("grid", "", kTenPoints), "grid.yaml");
  // A coordinator that died holding a lease about to run out.
  ASSERT_TRUE(b.store->acquire_coordinator(exp, "killed", 0.2));
  experiment::Coordinator next(*b.store, *b.queue, exp, "next");
  EXPECT_FALSE(next.tick().coordinating);
  EXPECT_EQ(b.store->trial_counts(exp).total(), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  experiment::Progress p = next.tick();
  EXPECT_TRUE(p.coordinating);
  EXPECT_EQ(p.counts.queued, 10);
}

}  // namespace
}  // namespace dnnlab
