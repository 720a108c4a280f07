// `dnnlab run` end to end with real worker processes and a real SQLite file:
// a sweep completes; a worker killed with SIGKILL mid-trial and a killed
// coordinator both end with every trial recorded exactly once; bad sweep
// files write nothing.
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <chrono>
#include <set>
#include <thread>

#include "cli_util.hpp"
#include "store/result_store.hpp"

namespace dnnlab::cli_test {
namespace {

using namespace std::chrono_literals;

std::string sweep_yaml(int epochs, const std::string& extra = "") {
  return R"(name: kill-test
template:
  data: {dataset: fashion-mnist, validation: 500, limit_train: 3000}
  model:
    layers:
      - repeat: ${depth}
        dense: 64
        activation: ${activation}
      - dense: 10
  train:
    epochs: )" +
         std::to_string(epochs) + R"(
    batch_size: 32
    optimizer: {type: sgd, lr: 0.05, momentum: 0.9}
search:
  method: grid
  parameters:
    depth: [1, 2, 3]
    activation: [relu, tanh]
)" + extra;
}

template <typename Pred>
bool wait_for(Pred pred, std::chrono::seconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(100ms);
  }
  return false;
}

// Every planned trial exists once and ended as finished.
void expect_each_trial_once(store::ResultStore& s, int64_t exp, size_t planned) {
  auto trials = all_trials(s, exp);
  ASSERT_EQ(trials.size(), planned);
  std::set<std::string> configs;
  for (const auto& t : trials) {
    EXPECT_EQ(t.status, store::TrialStatus::finished) << "trial " << t.index << ": " << t.error;
    EXPECT_TRUE(configs.insert(t.config_json).second) << "config twice: " << t.config_json;
    EXPECT_EQ(static_cast<int64_t>(s.trial(t.id)->curve.size()), t.metrics.epochs_done);
  }
  EXPECT_EQ(s.trial_counts(exp).finished, static_cast<int64_t>(planned));
}

TEST(RunCmd, QuickSweepCompletesAndResultsCommandsWork) {
  DNNLAB_NEED_FASHION_MNIST();
  TempDir dir;
  const std::string db = "sqlite:" + (dir.path / "t.db").string();
  const std::string sweep = std::string(DNNLAB_SOURCE_DIR) + "/examples/quick-sweep.yaml";
  Result r = run("run -q -w 2 --store " + db + " " + sweep);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("best trial per depth"), std::string::npos) << r.out;
  auto s = store::open_result_store(db);
  ASSERT_EQ(s->experiments().size(), 1u);
  expect_each_trial_once(*s, s->experiments()[0].id, 4);

  Result again = run("run -q -w 2 --store " + db + " " + sweep);  // finished: its results
  EXPECT_EQ(again.code, 0) << again.err;
  EXPECT_EQ(s->experiments().size(), 1u);
  EXPECT_NE(again.out.find("best trial per depth"), std::string::npos) << again.out;

  Result res = run("results quick-sweep --json --store " + db);
  ASSERT_EQ(res.code, 0) << res.err;
  auto rows = nlohmann::json::parse(res.out);
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_GE(rows[0]["val_acc"].get<double>(), rows[3]["val_acc"].get<double>());
  Result csv = run("results 1 --csv --top 2 --store " + db);
  EXPECT_EQ(std::count(csv.out.begin(), csv.out.end(), '\n'), 3) << csv.out;
  EXPECT_EQ(run("status --store " + db).code, 0);
  Result ex = run("export 1 --out " + dir.path.string() + " --store " + db);
  ASSERT_EQ(ex.code, 0) << ex.err;
  const std::string curves = slurp(dir.path / "quick-sweep-curves.csv");
  EXPECT_EQ(std::count(curves.begin(), curves.end(), '\n'), 1 + 4 * 2) << curves;

  // rerun: the same numbers bit for bit on the same build.
  const int64_t trial = rows[0]["id"];
  Result rr = run("rerun " + std::to_string(trial) + " --store " + db);
  EXPECT_EQ(rr.code, 0) << rr.out << rr.err;
  EXPECT_EQ(rr.out.find("DIFFERENT"), std::string::npos) << rr.out;
  EXPECT_NE(run("results nosuch --store " + db).code, 0);
}

TEST(RunCmd, WorkerKilledMidTrialIsRedeliveredAndCountedOnce) {
  DNNLAB_NEED_FASHION_MNIST();
  TempDir dir;
  dir.write("sweep.yaml", sweep_yaml(40));
  const std::string db = "sqlite:" + (dir.path / "t.db").string();
  pid_t coord =
      spawn(dir.path, {"run", "-q", "-w", "1", "--lease", "2", "--store", db, "sweep.yaml"});
  auto s = store::open_result_store(db);
  // Wait until a worker is inside a trial (an epoch has been recorded).
  int64_t victim_pid = 0, victim_trial = 0;
  ASSERT_TRUE(wait_for(
      [&] {
        for (const auto& w : s->workers())
          if (!w.gone && w.current_trial) {
            auto t = s->trial(*w.current_trial);
            if (t && t->status == store::TrialStatus::running && !t->curve.empty()) {
              victim_pid = w.pid;
              victim_trial = t->id;
              return true;
            }
          }
        return false;
      },
      120s))
      << slurp(dir.path / "log.txt");
  ASSERT_EQ(kill(static_cast<pid_t>(victim_pid), SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(coord, &status, 0), coord);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << slurp(dir.path / "log.txt");
  auto exp = s->experiments().at(0).id;
  expect_each_trial_once(*s, exp, 6);
  EXPECT_GE(s->trial(victim_trial)->attempt, 2) << "the killed trial should have run again";
}

TEST(RunCmd, CoordinatorKilledThenResumedFinishesEveryTrialOnce) {
  DNNLAB_NEED_FASHION_MNIST();
  TempDir dir;
  dir.write("sweep.yaml", sweep_yaml(12));
  const std::string db = "sqlite:" + (dir.path / "t.db").string();
  pid_t coord =
      spawn(dir.path, {"run", "-q", "-w", "2", "--lease", "3", "--store", db, "sweep.yaml"});
  auto s = store::open_result_store(db);
  ASSERT_TRUE(wait_for(
      [&] {
        return !s->experiments().empty() && s->trial_counts(s->experiments()[0].id).finished >= 1;
      },
      180s))
      << slurp(dir.path / "log.txt");
  kill(coord, SIGKILL);
  waitpid(coord, nullptr, 0);
  const int64_t exp = s->experiments()[0].id;
  std::map<int64_t, double> finished_before;
  // Workers notice their parent is gone and give their trials back.
  ASSERT_TRUE(wait_for(
      [&] {
        for (const auto& w : s->workers())
          if (!w.gone) return false;
        return true;
      },
      60s));
  for (const auto& t : all_trials(*s, exp))
    if (t.status == store::TrialStatus::finished) finished_before[t.id] = *t.finished_at;
  ASSERT_LT(finished_before.size(), 6u) << "the sweep finished before the coordinator was killed";

  Result r = run("run -q -w 2 --lease 3 --store " + db + " " + (dir.path / "sweep.yaml").string());
  ASSERT_EQ(r.code, 0) << r.err;
  ASSERT_EQ(s->experiments().size(), 1u) << "the same sweep should resume, not start again";
  expect_each_trial_once(*s, exp, 6);
  for (const auto& [id, when] : finished_before)
    EXPECT_EQ(*s->trial(id)->finished_at, when) << "finished trial " << id << " ran again";
}

TEST(RunCmd, DivergingTrialIsMarkedFailedAndTheSweepGoesOn) {
  TempDir dir;
  dir.write("nan.yaml", R"(name: nan
template:
  data: {dataset: synthetic, limit_train: 256, validation: 64}
  model:
    layers:
      - dense: 32
        activation: relu
      - dense: 10
  train:
    epochs: 3
    optimizer: {type: sgd, lr: ${lr}}
search:
  method: grid
  parameters:
    lr: [1.0e+9, 0.01]
)");
  const std::string db = "sqlite:" + (dir.path / "t.db").string();
  Result r = run("run -q -w 1 --no-server --store " + db + " " + (dir.path / "nan.yaml").string());
  // The sweep goes on to its end, and then says that a trial failed: exit 6.
  ASSERT_EQ(r.code, 6) << r.err;
  EXPECT_NE(r.err.find("1 of 2 trials failed"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("1 x loss is"), std::string::npos) << r.err;
  auto s = store::open_result_store(db);
  auto trials = all_trials(*s, s->experiments()[0].id);
  ASSERT_EQ(trials.size(), 2u);
  EXPECT_EQ(trials[0].status, store::TrialStatus::failed);
  EXPECT_NE(trials[0].error.find("loss"), std::string::npos) << trials[0].error;
  EXPECT_EQ(trials[1].status, store::TrialStatus::finished);
}

TEST(RunCmd, CtrlCReleasesRunningTrialsAndRunningAgainFinishes) {
  DNNLAB_NEED_FASHION_MNIST();
  TempDir dir;
  dir.write("sweep.yaml", sweep_yaml(40));
  const std::string db = "sqlite:" + (dir.path / "t.db").string();
  pid_t coord =
      spawn(dir.path, {"run", "-q", "-w", "2", "--no-server", "--store", db, "sweep.yaml"});
  auto s = store::open_result_store(db);
  ASSERT_TRUE(wait_for(
      [&] {
        return !s->experiments().empty() && s->trial_counts(s->experiments()[0].id).running == 2;
      },
      120s))
      << slurp(dir.path / "log.txt");
  kill(coord, SIGINT);  // what Ctrl-C sends (the workers are told by the coordinator)
  int status = 0;
  ASSERT_EQ(waitpid(coord, &status, 0), coord);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 130) << slurp(dir.path / "log.txt");
  const int64_t exp = s->experiments()[0].id;
  EXPECT_TRUE(wait_for(
      [&] {
        for (const auto& w : s->workers())
          if (!w.gone) return false;
        return true;
      },
      30s));
  EXPECT_EQ(s->trial_counts(exp).running, 0) << "a stopped worker left a trial marked running";
  EXPECT_NE(slurp(dir.path / "log.txt").find("--resume"), std::string::npos);
  Result r = run("run -q -w 2 --no-server --store " + db + " --resume " + std::to_string(exp));
  ASSERT_EQ(r.code, 0) << r.err;
  expect_each_trial_once(*s, exp, 6);
}

TEST(RunCmd, BadSweepFileWritesNothing) {
  TempDir dir;
  auto path = dir.write("bad.yaml", sweep_yaml(1, "scheduler: {type: hyperband}\n"));
  const auto db = dir.path / "t.db";
  Result r = run("run -q --store sqlite:" + db.string() + " " + path.string());
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("bad.yaml:"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("scheduler"), std::string::npos) << r.err;
  if (std::filesystem::exists(db)) {
    EXPECT_TRUE(store::open_result_store("sqlite:" + db.string())->experiments().empty());
  }

  auto unknown =
      dir.write("p.yaml", sweep_yaml(1, "").replace(sweep_yaml(1).find("${depth}"), 8, "${dept}"));
  Result r2 = run("run -q --store sqlite:" + db.string() + " " + unknown.string());
  EXPECT_EQ(r2.code, 2) << r2.err;
  EXPECT_NE(r2.err.find("p.yaml:6:"), std::string::npos) << r2.err;
  EXPECT_NE(r2.err.find("dept"), std::string::npos) << r2.err;
}

}  // namespace
}  // namespace dnnlab::cli_test
