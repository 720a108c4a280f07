// PostgreSQL restarted mid-sweep: `dnnlab run --store postgres://…` (with the
// RabbitMQ broker, and with the SQLite queue) while the test stops the
// server with `pg_ctl stop -m fast` and starts it again a few seconds later
// on the same port and data directory. The coordinator's and the workers'
// store calls wait, reconnecting with backoff, and nothing is acked before
// its result is stored: the sweep completes with every trial's result and
// every epoch row exactly once.
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <map>
#include <set>
#include <thread>

#include "../cli_util.hpp"
#include "store/pg_server.hpp"
#include "store/result_store.hpp"
#ifdef DNNLAB_TEST_AMQP
#include "rabbitmq_server.hpp"
#endif

extern char** environ;

namespace dnnlab::cli_test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr int kTrials = 18;
constexpr int kEpochs = 8;

// 18 trials of 8 epochs on synthetic data: long enough (seconds) for the
// server to go away while trials run, short enough for a test.
std::string sweep_yaml() {
  return R"(name: pg-restart
template:
  data: {dataset: synthetic, limit_train: 3000, validation: 64}
  model:
    layers:
      - repeat: ${depth}
        dense: 64
        activation: ${activation}
      - dense: 10
  train:
    epochs: )" +
         std::to_string(kEpochs) +
         R"(
    batch_size: 32
    optimizer: {type: sgd, lr: ${lr}}
search:
  method: grid
  parameters:
    depth: [1, 2, 3]
    activation: [relu, tanh]
    lr: [0.02, 0.05, 0.1]
)";
}

// Waits for `pid` up to `limit`; false (and the process killed) when it
// did not end in time.
bool wait_for(pid_t pid, int& status, std::chrono::seconds limit) {
  const auto give_up = Clock::now() + limit;
  while (Clock::now() < give_up) {
    if (waitpid(pid, &status, WNOHANG) == pid) return true;
    std::this_thread::sleep_for(100ms);
  }
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  return false;
}

class PgRestart : public ::testing::TestWithParam<std::string> {};

INSTANTIATE_TEST_SUITE_P(Broker, PgRestart,
                         ::testing::Values(
#ifdef DNNLAB_TEST_AMQP
                             "amqp",
#endif
                             "sqlite"),
                         [](const auto& info) { return info.param; });

TEST_P(PgRestart, PostgresRestartedMidSweepLosesNothingDoublesNothing) {
  // A server of its own: this test stops and starts it (the ctest run's is shared).
  auto owned = testing::PgServer::start_private();
  auto* pg = owned.get();
  if (!pg) {
    if (std::getenv("CI")) FAIL() << testing::PgServer::why_missing();
    GTEST_SKIP() << testing::PgServer::why_missing();
  }
  TempDir dir;
  std::string broker = "sqlite:" + (dir.path / "queue.db").string();
#ifdef DNNLAB_TEST_AMQP
  // A broker of its own: queue names follow experiment ids, which restart
  // at 1 in every store.
  std::unique_ptr<testing::RabbitMqServer> rabbit;
  if (GetParam() == "amqp") {
    rabbit = std::make_unique<testing::RabbitMqServer>();
    DNNLAB_REQUIRE_RABBITMQ(rabbit->installed() ? rabbit->url() : std::string());
    broker = rabbit->url();
  }
#endif
  const std::string url = pg->new_database();
  dir.write("sweep.yaml", sweep_yaml());
  pid_t coord =
      spawn(dir.path, {"run", "-q", "-w", "2", "--broker", broker, "--store", url, "sweep.yaml"});

  store::StoreOptions patient;
  patient.reconnect_seconds = 120;
  std::unique_ptr<store::ResultStore> s;
  int64_t exp = 0, finished_at_stop = 0, running_at_stop = 0;
  const auto give_up = Clock::now() + 120s;
  // Stop the server once a trial has finished and others are running.
  while (Clock::now() < give_up) {
    std::this_thread::sleep_for(50ms);
    try {
      if (!s) s = store::open_result_store(url, nullptr, patient);
      if (!exp && !s->experiments().empty()) exp = s->experiments()[0].id;
      if (!exp) continue;
      auto n = s->trial_counts(exp);
      if (n.finished >= 1 && n.running >= 1) {
        finished_at_stop = n.finished;
        running_at_stop = n.running;
        break;
      }
    } catch (const std::exception&) {  // the schema may not be there yet
      s.reset();
    }
  }
  ASSERT_GT(running_at_stop, 0) << slurp(dir.path / "log.txt");
  pg->stop();
  std::this_thread::sleep_for(4s);
  pg->start();

  int status = 0;
  ASSERT_TRUE(wait_for(coord, status, 300s)) << "the sweep did not end\n"
                                             << slurp(dir.path / "log.txt");
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << slurp(dir.path / "log.txt");
  EXPECT_LT(finished_at_stop, kTrials) << "the server went away after the sweep";

  auto trials = all_trials(*s, exp);
  ASSERT_EQ(trials.size(), static_cast<size_t>(kTrials));
  std::set<std::string> configs;
  for (const auto& t : trials) {
    EXPECT_EQ(t.status, store::TrialStatus::finished) << "trial " << t.index << ": " << t.error;
    EXPECT_TRUE(configs.insert(t.config_json).second) << "config twice: " << t.config_json;
    EXPECT_EQ(t.metrics.epochs_done, kEpochs) << "trial " << t.index;
    // The current attempt's curve: epochs 1..8, each once.
    auto curve = s->trial(t.id)->curve;
    ASSERT_EQ(curve.size(), static_cast<size_t>(kEpochs)) << "trial " << t.index;
    for (int e = 0; e < kEpochs; ++e) EXPECT_EQ(curve[e].epoch, e + 1) << "trial " << t.index;
  }
  auto n = s->trial_counts(exp);
  EXPECT_EQ(n.finished, kTrials);
  EXPECT_EQ(n.total(), kTrials) << "counts kept in step with the trials";
  // Each trial's result was counted once: one trial.finished event each.
  std::map<int64_t, int> finished_events;
  for (const auto& e : s->events_of_type("trial.finished"))
    ++finished_events[e.data["trial"].get<int64_t>()];
  EXPECT_EQ(finished_events.size(), static_cast<size_t>(kTrials));
  for (const auto& [trial, count] : finished_events)
    EXPECT_EQ(count, 1) << "trial " << trial << " finished " << count << " times";
  std::cout << "at the stop: " << finished_at_stop << " finished, " << running_at_stop
            << " running; worker log:\n"
            << slurp(dir.path / "log.txt").substr(0, 2000) << "\n";
}

}  // namespace
}  // namespace dnnlab::cli_test
