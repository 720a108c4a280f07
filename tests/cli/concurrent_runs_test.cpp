// Two `dnnlab run` of one sweep on one store at the same time: one
// coordinates, the other says so and lends its workers; neither dies and
// every trial exists once.
#include <spawn.h>
#include <sys/wait.h>

#include <chrono>
#include <set>
#include <thread>

#include "cli_util.hpp"
#include "store/result_store.hpp"

extern char** environ;

namespace dnnlab::cli_test {
namespace {

constexpr const char* kTpeSweep = R"(name: twice
template:
  data: {dataset: synthetic, limit_train: 4096, validation: 256}
  model:
    layers:
      - dense: ${width}
        activation: relu
      - dense: 10
  train:
    epochs: 2
    batch_size: 64
    optimizer: {type: sgd, lr: ${lr}}
search:
  method: tpe
  budget: 8
  n_startup: 2
  parameters:
    width: {int: [64, 256]}
    lr: {loguniform: [0.001, 0.1]}
)";

TEST(ConcurrentRuns, TheSecondRunOfASweepWorksUnderTheFirstCoordinator) {
  TempDir dir;
  dir.write("twice.yaml", kTpeSweep);
  const std::string db = "sqlite:" + (dir.path / "t.db").string();
  const std::string args =
      "run -q -w 1 --no-server --store " + db + " " + (dir.path / "twice.yaml").string();
  // The first run, in the background.
  std::vector<std::string> sh = {"/bin/sh", "-c",
                                 std::string("exec ") + DNNLAB_BINARY + " " + args +
                                     " >/dev/null 2>" + (dir.path / "first.txt").string()};
  std::vector<char*> argv;
  for (auto& a : sh) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t first = 0;
  ASSERT_EQ(posix_spawn(&first, "/bin/sh", nullptr, nullptr, argv.data(), environ), 0);
  // Started: its first trials exist.
  std::unique_ptr<store::ResultStore> s;
  for (int i = 0; i < 600; ++i) {
    if (std::filesystem::exists(dir.path / "t.db")) {
      if (!s) s = store::open_result_store(db);
      auto e = s->experiments();
      if (!e.empty() && s->trial_counts(e[0].id).total() > 0) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(s) << slurp(dir.path / "first.txt");

  Result second = run(args);
  int status = 0;
  ASSERT_EQ(waitpid(first, &status, 0), first);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << slurp(dir.path / "first.txt");
  EXPECT_EQ(second.code, 0) << second.err;
  EXPECT_NE(second.err.find("is coordinated by another process"), std::string::npos) << second.err;

  ASSERT_EQ(s->experiments().size(), 1u) << "the second run should attach to the first's";
  const auto exp = s->experiments()[0].id;
  store::TrialQuery all;
  all.limit = 0;
  std::set<std::int64_t> indexes;
  for (const auto& t : s->trials(exp, all)) {
    EXPECT_EQ(t.status, store::TrialStatus::finished) << "trial " << t.index << ": " << t.error;
    indexes.insert(t.index);
  }
  EXPECT_EQ(indexes.size(), 8u);
  EXPECT_EQ(s->experiment(exp)->status, store::ExperimentStatus::finished);
}

}  // namespace
}  // namespace dnnlab::cli_test
