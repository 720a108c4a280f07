// `dnnlab run --broker amqp://…` end to end: the coordinator publishes to a
// private RabbitMQ (tests/queue/amqp/rabbitmq_server.hpp), worker
// processes lease from it, the store is an SQLite file. A sweep completes with
// every trial once; a worker killed with SIGKILL mid-trial has its trial
// redelivered by the broker and recorded once.
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <set>
#include <thread>

#include "../cli_util.hpp"
#include "rabbitmq_server.hpp"
#include "store/result_store.hpp"

extern char** environ;

namespace dnnlab::cli_test {
namespace {

using namespace std::chrono_literals;

// Synthetic data: nothing to install. `limit_train` and `epochs` set how long
// a trial runs.
std::string sweep_yaml(const std::string& name, int limit_train, int epochs) {
  return "name: " + name + R"(
template:
  data: {dataset: synthetic, limit_train: )" +
         std::to_string(limit_train) + R"(, validation: 64}
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
    optimizer: {type: sgd, lr: 0.05}
search:
  method: grid
  parameters:
    depth: [1, 2, 3]
    activation: [relu, tanh]
)";
}

// Every planned trial exists once and finished; returns them.
std::vector<store::TrialRecord> expect_each_trial_once(store::ResultStore& s, int64_t exp,
                                                       size_t planned) {
  auto trials = all_trials(s, exp);
  EXPECT_EQ(trials.size(), planned);
  std::set<std::string> configs;
  for (const auto& t : trials) {
    EXPECT_EQ(t.status, store::TrialStatus::finished) << "trial " << t.index << ": " << t.error;
    EXPECT_TRUE(configs.insert(t.config_json).second) << "config twice: " << t.config_json;
    EXPECT_EQ(static_cast<int64_t>(s.trial(t.id)->curve.size()), t.metrics.epochs_done);
  }
  EXPECT_EQ(s.trial_counts(exp).finished, static_cast<int64_t>(planned));
  return trials;
}

// A broker per test: queue names follow experiment ids, which restart at 1
// in every store file, so two tests on one broker would share queues.
class RunAmqp : public ::testing::Test {
 protected:
  void SetUp() override {
    broker_ = std::make_unique<testing::RabbitMqServer>();
    url_ = broker_->installed() ? broker_->url() : std::string();
    DNNLAB_REQUIRE_RABBITMQ(url_);
  }
  std::unique_ptr<testing::RabbitMqServer> broker_;
  std::string url_;
};

TEST_F(RunAmqp, SweepThroughRabbitMqRecordsEachTrialOnce) {
  TempDir dir;
  dir.write("sweep.yaml", sweep_yaml("amqp-sweep", 64, 1));
  const std::string db = "sqlite:" + (dir.path / "t.db").string();
  Result r = run("run -q -w 2 --broker '" + url_ + "?prefetch=2' --store " + db + " " +
                 (dir.path / "sweep.yaml").string());
  ASSERT_EQ(r.code, 0) << r.err;
  auto s = store::open_result_store(db);
  ASSERT_EQ(s->experiments().size(), 1u);
  for (const auto& t : expect_each_trial_once(*s, s->experiments()[0].id, 6))
    EXPECT_EQ(t.attempt, 1) << "trial " << t.index << " ran twice";
}

TEST_F(RunAmqp, WorkerKilledMidTrialIsRedeliveredByTheBrokerAndCountedOnce) {
  TempDir dir;
  // 100 epochs: a trial runs for 3-5 s, so one is seen running with its
  // first epochs stored (the worker writes epochs every 0.5 s) before it ends.
  dir.write("sweep.yaml", sweep_yaml("amqp-kill", 4000, 100));
  const std::string db = "sqlite:" + (dir.path / "t.db").string();
  pid_t coord = spawn(dir.path, {"run", "-q", "-w", "2", "--broker", url_ + "?prefetch=2",
                                 "--store", db, "sweep.yaml"});
  std::unique_ptr<store::ResultStore> s;
  int64_t victim_pid = 0, victim_trial = 0;
  const auto give_up = std::chrono::steady_clock::now() + 120s;
  int status = 0;
  bool coord_ended = false;
  while (!victim_pid && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(100ms);
    if (waitpid(coord, &status, WNOHANG) == coord) {
      coord_ended = true;
      break;
    }
    if (!s && std::filesystem::exists(dir.path / "t.db")) s = store::open_result_store(db);
    if (!s) continue;
    try {
      for (const auto& w : s->workers())
        if (!w.gone && w.current_trial) {
          auto t = s->trial(*w.current_trial);
          if (t && t->status == store::TrialStatus::running && !t->curve.empty()) {
            victim_pid = w.pid;
            victim_trial = t->id;
          }
        }
    } catch (const std::exception&) {  // the schema may not be there yet
    }
  }
  ASSERT_FALSE(coord_ended) << "the sweep ended before a running trial with epochs was seen\n"
                            << slurp(dir.path / "log.txt");
  ASSERT_NE(victim_pid, 0) << slurp(dir.path / "log.txt");
  ASSERT_EQ(kill(static_cast<pid_t>(victim_pid), SIGKILL), 0);
  ASSERT_EQ(waitpid(coord, &status, 0), coord);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << slurp(dir.path / "log.txt");
  auto exp = s->experiments().at(0).id;
  expect_each_trial_once(*s, exp, 6);
  EXPECT_EQ(s->trial(victim_trial)->attempt, 2) << "the killed worker's trial ran again, once";
}

// `heartbeat=1`: the broker closes a connection it has not heard from for
// about 2 s. Each trial trains for several seconds, during which the worker's
// own connection (the one its deliveries came on) must keep answering, or
// the broker takes the trial back ("holder lost") and it runs again until
// max_attempts. Every trial ends at attempt 1. (400 epochs: 120 made trials
// of 1.3-1.7 s on a faster machine than the one they were sized on, too
// short to show anything; 400 is 4-6 s there.)
TEST_F(RunAmqp, TrialsLongerThanTheHeartbeatKeepTheirDelivery) {
  TempDir dir;
  dir.write("sweep.yaml", sweep_yaml("amqp-heartbeat", 4000, 400));
  const std::string db = "sqlite:" + (dir.path / "t.db").string();
  Result r = run("run -q -w 2 --broker '" + url_ + "?heartbeat=1' --store " + db + " " +
                 (dir.path / "sweep.yaml").string());
  ASSERT_EQ(r.code, 0) << r.err;
  auto s = store::open_result_store(db);
  for (const auto& t : expect_each_trial_once(*s, s->experiments().at(0).id, 6)) {
    EXPECT_EQ(t.attempt, 1) << "trial " << t.index << ": " << t.error;
    EXPECT_GT(t.metrics.seconds, 2.0) << "trial " << t.index << " is too short to show it";
  }
}

// Trials of a few hundred ms (far above the ~50 ms batch the worker sizes
// its prefetch by) are not hoarded: a worker asks the broker for two of them
// (prefetch 2: one trains, one waits), not for a batch as it does for
// trials of a few ms, so both workers of `run -w 2` train a share of 6.
TEST_F(RunAmqp, LongTrialsAreNotHoardedByOneWorker) {
  TempDir dir;
  dir.write("sweep.yaml", sweep_yaml("amqp-long", 4000, 3));
  const std::string db = "sqlite:" + (dir.path / "t.db").string();
  Result r = run("run -q -w 2 --broker '" + url_ + "' --store " + db + " " +
                 (dir.path / "sweep.yaml").string());
  ASSERT_EQ(r.code, 0) << r.err;
  auto s = store::open_result_store(db);
  std::map<std::string, int> per_worker;
  for (const auto& t : expect_each_trial_once(*s, s->experiments()[0].id, 6)) {
    ++per_worker[t.worker];
    EXPECT_EQ(t.attempt, 1);
  }
  ASSERT_EQ(per_worker.size(), 2u) << "one worker trained every trial";
  for (const auto& [worker, n] : per_worker) EXPECT_GE(n, 2) << worker;
}

// `dnnlab worker --slots 3` beside a coordinator: its three slots hold trials
// at the same time (seen in the store's workers table while the sweep runs),
// the sweep ends with every trial once, and the slot supervisor exits 0 when
// the experiment ends.
TEST_F(RunAmqp, WorkerSlotsTrainSeveralTrialsAtOnce) {
  TempDir dir;
  dir.write("sweep.yaml", sweep_yaml("amqp-slots", 4000, 8));
  const std::string db = "sqlite:" + (dir.path / "t.db").string();
  pid_t coord =
      spawn(dir.path, {"run", "-q", "-w", "1", "--broker", url_, "--store", db, "sweep.yaml"});
  std::unique_ptr<store::ResultStore> s;
  int64_t exp = 0;
  const auto give_up = std::chrono::steady_clock::now() + 120s;
  while (!exp && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(100ms);
    if (!s && std::filesystem::exists(dir.path / "t.db")) s = store::open_result_store(db);
    try {
      if (s && !s->experiments().empty()) exp = s->experiments()[0].id;
    } catch (const std::exception&) {  // the schema may not be there yet
    }
  }
  ASSERT_NE(exp, 0) << slurp(dir.path / "log.txt");
  pid_t host =
      spawn(dir.path, {"worker", "--slots", "3", "--id", "hostb", "--experiment",
                       std::to_string(exp), "--idle-exit", "30", "--broker", url_, "--store", db});
  // The most slots of `hostb` seen holding a running trial at one moment.
  size_t most_at_once = 0;
  std::set<std::string> slot_ids;
  int status = 0;
  while (waitpid(coord, &status, WNOHANG) == 0 && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(50ms);
    size_t now = 0;
    for (const auto& w : s->workers())
      if (!w.gone && w.id.rfind("hostb-", 0) == 0) {
        slot_ids.insert(w.id);
        now += w.current_trial.has_value();
      }
    most_at_once = std::max(most_at_once, now);
  }
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << slurp(dir.path / "log.txt");
  int host_status = 0;
  ASSERT_EQ(waitpid(host, &host_status, 0), host);
  EXPECT_TRUE(WIFEXITED(host_status) && WEXITSTATUS(host_status) == 0)
      << slurp(dir.path / "log.txt");
  EXPECT_EQ(slot_ids, (std::set<std::string>{"hostb-0", "hostb-1", "hostb-2"}));
  EXPECT_GE(most_at_once, 2u) << "the slots never trained at the same time";
  std::set<std::string> trained_by;
  for (const auto& t : expect_each_trial_once(*s, exp, 6)) trained_by.insert(t.worker);
  EXPECT_GE(std::count_if(trained_by.begin(), trained_by.end(),
                          [](const std::string& w) { return w.rfind("hostb-", 0) == 0; }),
            2)
      << "trials ran on fewer than two slots";
}

}  // namespace
}  // namespace dnnlab::cli_test
