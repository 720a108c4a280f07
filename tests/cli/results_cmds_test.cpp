// `dnnlab results`, `export` and `rerun` on real stores: the identifiers
// users see are the ones they type, exported curves are the stored ones,
// reruns replay exactly the run that happened, CSV survives hostile values.
// Synthetic data keeps every sweep here to a second or two.
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>
#include <regex>
#include <thread>

#include "cli_util.hpp"
#include "dnnlab/build_info.hpp"
#include "nn/kernels.hpp"
#include "store/result_store.hpp"
#include "store/trial_json.hpp"

namespace dnnlab::cli_test {
namespace {

using namespace std::chrono_literals;

// Five learning rates, cosine schedule, a median rule that stops the worst
// after epoch 3: two trials end pruned after 3 of 6 epochs.
const std::string kMedianSweep = R"(name: med
template:
  data: {dataset: synthetic, limit_train: 256, validation: 64}
  model:
    layers:
      - dense: 16
        activation: relu
      - dense: 10
  train:
    epochs: 6
    batch_size: 32
    optimizer: {type: sgd, lr: ${lr}}
    schedule: {type: cosine, min_lr: 0.001}
search:
  method: grid
  parameters:
    lr: [0.3, 0.1, 0.03, 0.01, 0.003]
scheduler: {type: median, grace_epochs: 3}
)";

std::string small_sweep(const std::string& name, const std::string& params,
                        const std::string& lr = "0.1", const std::string& act = "relu") {
  return "name: " + name + R"(
template:
  data: {dataset: synthetic, limit_train: 128, validation: 32}
  model:
    layers:
      - dense: 8
        activation: )" +
         act + R"(
      - dense: 10
  train:
    epochs: 2
    batch_size: 32
    optimizer: {type: sgd, lr: )" +
         lr + R"(}
search:
  method: grid
  parameters:
)" + params;
}

struct Store {
  TempDir dir;
  std::string url = "sqlite:" + (dir.path / "t.db").string();
  // Runs a sweep to its end; returns `run`'s result.
  Result sweep(const std::string& yaml, const std::string& file = "sweep.yaml") {
    return run("run -q -w 1 --no-server --store " + url + " " + dir.write(file, yaml).string());
  }
  std::unique_ptr<store::ResultStore> open() { return store::open_result_store(url); }
};

// RFC 4180: rows of fields, quoted fields may hold commas, quotes, newlines.
std::vector<std::vector<std::string>> parse_csv(const std::string& text) {
  std::vector<std::vector<std::string>> rows(1, std::vector<std::string>(1));
  bool quoted = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    std::string& field = rows.back().back();
    if (quoted) {
      if (c == '"' && i + 1 < text.size() && text[i + 1] == '"')
        field += '"', ++i;
      else if (c == '"')
        quoted = false;
      else
        field += c;
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      rows.back().emplace_back();
    } else if (c == '\n') {
      rows.emplace_back(1);
    } else {
      field += c;
    }
  }
  if (rows.back().size() == 1 && rows.back()[0].empty()) rows.pop_back();
  return rows;
}

// The numbers in the first column of a `results` table ("trial").
std::vector<int64_t> table_trials(const std::string& out) {
  std::vector<int64_t> ids;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    std::smatch m;
    if (std::regex_search(line, m, std::regex(R"(^\s*(\d+)\s+(finished|pruned|failed))")))
      ids.push_back(std::stoll(m[1]));
  }
  return ids;
}

TEST(ExportCmd, CurvesHoldTheStoredEpochsFromTheFirstRow) {
  Store st;
  ASSERT_EQ(st.sweep(kMedianSweep).code, 0);
  auto s = st.open();
  const int64_t exp = s->experiments().at(0).id;
  Result ex = run("export med --out " + st.dir.path.string() + " --store " + st.url);
  ASSERT_EQ(ex.code, 0) << ex.err;
  auto rows = parse_csv(slurp(st.dir.path / "med-curves.csv"));
  ASSERT_EQ(rows.at(0).at(0), "trial_id");
  ASSERT_EQ(rows.at(0).at(3), "train_loss");
  std::map<int64_t, std::vector<std::vector<std::string>>> by_trial;
  for (size_t i = 1; i < rows.size(); ++i) by_trial[std::stoll(rows[i][0])].push_back(rows[i]);
  ASSERT_EQ(by_trial.size(), 5u);
  for (const auto& t : all_trials(*s, exp)) {
    const auto stored = s->trial(t.id)->curve;
    const auto& got = by_trial[t.id];
    ASSERT_EQ(got.size(), stored.size()) << "trial " << t.id;
    for (size_t e = 0; e < got.size(); ++e) {
      EXPECT_EQ(got[e][2], std::to_string(stored[e].epoch)) << "trial " << t.id << " row " << e;
      const double loss = std::stod(got[e][3]);
      EXPECT_NEAR(loss, *stored[e].train_loss, 1e-6 * std::fabs(*stored[e].train_loss))
          << "trial " << t.id << " epoch " << e + 1;
      EXPECT_GT(loss, 1e-6) << "trial " << t.id << " epoch " << e + 1;
    }
  }
}

TEST(RerunCmd, PrunedTrialWithCosineScheduleIsIdentical) {
  Store st;
  ASSERT_EQ(st.sweep(kMedianSweep).code, 0);
  auto s = st.open();
  int reran = 0;
  for (const auto& t : all_trials(*s, s->experiments().at(0).id)) {
    // A pruned net is not evaluated on the test split (docs/sweep.md,
    // "Schedulers"); a finished one is, and rerun checks both ways.
    if (t.status == store::TrialStatus::finished) {
      EXPECT_TRUE(t.metrics.test_acc) << t.id;
    }
    if (t.status != store::TrialStatus::pruned) continue;
    EXPECT_FALSE(t.metrics.test_acc) << t.id;
    ASSERT_GE(t.metrics.epochs_done, 2) << "the schedule's span matters only after epoch 1";
    ASSERT_LT(t.metrics.epochs_done, 6);
    Result r = run("rerun " + std::to_string(t.id) + " --store " + st.url);
    EXPECT_EQ(r.code, 0) << r.out << r.err;
    EXPECT_EQ(r.out.find("DIFFERENT"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("test_acc   stored -"), std::string::npos) << r.out;
    EXPECT_NE(r.err.find(std::to_string(t.metrics.epochs_done) + " of 6 epochs"), std::string::npos)
        << r.err;
    ++reran;
  }
  EXPECT_GE(reran, 1) << "the sweep pruned nothing";
}

TEST(RerunCmd, QueuedOrRunningTrialIsRefused) {
  Store st;
  auto s = st.open();
  store::ExperimentRecord e;
  e.name = "waiting";
  e.spec_text = small_sweep("waiting", "    lr: [0.1, 0.2]\n", "${lr}");
  e.spec_path = "waiting.yaml";
  e.method = "grid";
  const int64_t exp = s->create_experiment(e);
  auto ids = s->add_trials(exp, {{0, R"({"lr": 0.1})", 1}, {1, R"({"lr": 0.2})", 2}});
  ASSERT_TRUE(s->mark_running(ids[1], 1, "w1"));
  Result q = run("rerun " + std::to_string(ids[0]) + " --store " + st.url);
  EXPECT_EQ(q.code, 2) << q.out << q.err;
  EXPECT_NE(q.err.find("queued"), std::string::npos) << q.err;
  EXPECT_EQ(q.out.find("DIFFERENT"), std::string::npos) << q.out;
  Result r = run("rerun " + std::to_string(ids[1]) + " --store " + st.url);
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("running"), std::string::npos) << r.err;
  Result none = run("rerun 999 --store " + st.url);
  EXPECT_EQ(none.code, 2) << none.err;
  EXPECT_NE(none.err.find("999"), std::string::npos) << none.err;
}

// Two experiments in one store: the second's trials have ids 6.., indexes 0...
TEST(ResultsCmd, TablesShowTheTrialIdThatRerunTakes) {
  Store st;
  ASSERT_EQ(st.sweep(kMedianSweep, "med.yaml").code, 0);
  Result second = st.sweep(small_sweep("second", "    lr: [0.1, 0.3]\n", "${lr}"), "second.yaml");
  ASSERT_EQ(second.code, 0) << second.err;
  auto s = st.open();
  const int64_t exp = s->experiments().at(0).id;  // newest first
  std::set<int64_t> ids;
  for (const auto& t : all_trials(*s, exp)) ids.insert(t.id);
  ASSERT_EQ(ids.size(), 2u);
  ASSERT_GT(*ids.begin(), 1) << "ids and indexes must differ for this test";

  const auto in_run_table = table_trials(second.out);
  EXPECT_EQ(std::set<int64_t>(in_run_table.begin(), in_run_table.end()), ids) << second.out;
  Result res = run("results second --store " + st.url);
  ASSERT_EQ(res.code, 0) << res.err;
  const auto shown = table_trials(res.out);
  ASSERT_EQ(shown.size(), 2u) << res.out;
  EXPECT_EQ(std::set<int64_t>(shown.begin(), shown.end()), ids) << res.out;

  // The table's first trial is the one rerun trains (its parameters say so).
  auto json = nlohmann::json::parse(run("results second --json --store " + st.url).out);
  EXPECT_EQ(json[0]["id"].get<int64_t>(), shown[0]);
  Result rr = run("rerun " + std::to_string(shown[0]) + " --store " + st.url);
  EXPECT_EQ(rr.code, 0) << rr.out << rr.err;
  EXPECT_NE(rr.err.find("rerunning trial " + std::to_string(shown[0])), std::string::npos);
  EXPECT_NE(rr.err.find("lr=" + json[0]["params"]["lr"].dump()), std::string::npos) << rr.err;
}

// `results --json` writes each trial with the REST API's encoder
// (store/trial_json.hpp): every field docs/openapi.yaml's Trial requires, the
// 64-bit seed as its decimal digits (a JSON number loses digits past 2^53),
// and each row byte for byte the object GET /api/experiments/{id}/trials
// sends for that trial.
TEST(ResultsCmd, JsonRowsAreTheRestApisTrialObjects) {
  Store st;
  Result sw = st.sweep(small_sweep("js", "    lr: [0.1, 0.03]\n", "${lr}"), "js.yaml");
  ASSERT_EQ(sw.code, 0) << sw.err;
  Result r = run("results js --json --sort index --ascending --store " + st.url);
  ASSERT_EQ(r.code, 0) << r.err;
  const auto rows = nlohmann::json::parse(r.out);
  ASSERT_EQ(rows.size(), 2u) << r.out;
  auto s = st.open();
  const int64_t exp = s->experiments().at(0).id;
  std::vector<store::TrialRecord> stored;
  for (const auto& row : rows) {
    SCOPED_TRACE(row.dump());
    for (const char* key :
         {"id", "experiment_id", "index", "params", "seed", "status", "attempt", "worker",
          "started_at", "finished_at", "train_loss", "train_acc", "val_loss", "val_acc", "test_acc",
          "epochs_done", "seconds", "error", "provisional"})
      EXPECT_TRUE(row.contains(key)) << key;
    auto t = s->trial(row["id"].get<int64_t>());
    ASSERT_TRUE(t);
    ASSERT_TRUE(row["seed"].is_string());
    EXPECT_EQ(row["seed"].get<std::string>(), std::to_string(t->seed));
    EXPECT_EQ(row["experiment_id"].get<int64_t>(), exp);
    EXPECT_EQ(row["status"], "finished");
    EXPECT_EQ(row["epochs_done"].get<int>(), 2);
    EXPECT_EQ(row["val_acc"].get<double>(), t->metrics.val_acc.value_or(-1));
    EXPECT_TRUE(row["started_at"].is_number());
    EXPECT_EQ(row["provisional"], false);
    stored.push_back(*t);
  }
  EXPECT_LT(rows[0]["index"].get<int64_t>(), rows[1]["index"].get<int64_t>());
  // One trial a line, each the encoder's row for the stored trial.
  std::string want = "[";
  for (std::size_t i = 0; i < stored.size(); ++i) {
    want += i ? ",\n  " : "\n  ";
    store::append_trial_json(want, stored[i]);
  }
  EXPECT_EQ(r.out, want + "\n]\n");
}

TEST(RunCmd, BestPerDepthTableTakesAnyParameterType) {
  Store st;
  // `depth` as a float (here it is the learning rate) and as a string.
  Result f = st.sweep(small_sweep("fdepth", "    depth: [0.1, 0.3]\n", "${depth}"), "f.yaml");
  EXPECT_EQ(f.code, 0) << f.err;
  EXPECT_NE(f.out.find("best trial per depth"), std::string::npos) << f.out;
  EXPECT_EQ(table_trials(f.out).size(), 2u) << f.out;
  Result s =
      st.sweep(small_sweep("sdepth", "    depth: [relu, tanh]\n", "0.1", "${depth}"), "s.yaml");
  EXPECT_EQ(s.code, 0) << s.err;
  EXPECT_EQ(table_trials(s.out).size(), 2u) << s.out;
  EXPECT_NE(s.out.find("tanh"), std::string::npos) << s.out;
}

TEST(ResultsCmd, CsvQuotesCommasQuotesAndNewlines) {
  Store st;
  auto s = st.open();
  store::ExperimentRecord e;
  e.name = "csv";
  e.spec_text = small_sweep("csv", "    lr: [0.1]\n", "${lr}");
  e.spec_path = "csv.yaml";
  e.method = "grid";
  const int64_t exp = s->create_experiment(e);
  auto ids = s->add_trials(exp, {{0, R"({"lr": 0.1})", 1}});
  ASSERT_TRUE(s->mark_running(ids[0], 1, "w1"));
  const std::string error = "shape [1, 2] \"odd\", then\nmore";
  ASSERT_TRUE(s->finish_trial(ids[0], 1, store::TrialStatus::failed, {}, error));
  Result r = run("results csv --csv --store " + st.url);
  ASSERT_EQ(r.code, 0) << r.err;
  auto rows = parse_csv(r.out);
  ASSERT_EQ(rows.size(), 2u) << r.out;
  EXPECT_EQ(rows[1].size(), rows[0].size()) << r.out;
  EXPECT_EQ(rows[1].back(), error) << r.out;
  ASSERT_EQ(run("export csv --out " + st.dir.path.string() + " --store " + st.url).code, 0);
  auto exported = parse_csv(slurp(st.dir.path / "csv-trials.csv"));
  ASSERT_EQ(exported.size(), 2u);
  EXPECT_EQ(exported[1].back(), error);
}

TEST(ResultsCmd, NumericNamesAndUnknownExperiments) {
  Store st;
  ASSERT_EQ(st.sweep(small_sweep("\"2024\"", "    lr: [0.1]\n", "${lr}")).code, 0);
  Result r = run("results 2024 --store " + st.url);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(run("results 1 --store " + st.url).code, 0);
  // "2" would be experiment 2's id and the first one's name: ambiguous.
  ASSERT_EQ(st.sweep(small_sweep("\"2\"", "    lr: [0.2]\n", "${lr}"), "two.yaml").code, 0);
  ASSERT_EQ(st.sweep(small_sweep("three", "    lr: [0.3]\n", "${lr}"), "three.yaml").code, 0);
  Result amb = run("results 2 --store " + st.url);
  EXPECT_EQ(amb.code, 0) << "experiment 2 is named '2': one experiment, no ambiguity";
  auto s = st.open();
  store::ExperimentRecord e = *s->experiment(3);
  e.name = "1";  // id 3 named "1", experiment 1 has id 1
  s->create_experiment(e);
  Result both = run("results 1 --store " + st.url);
  EXPECT_EQ(both.code, 2) << both.out;
  EXPECT_NE(both.err.find("experiment 4"), std::string::npos) << both.err;
  Result none = run("results nosuch --store " + st.url);
  EXPECT_EQ(none.code, 2);
  EXPECT_NE(none.err.find("nosuch"), std::string::npos) << none.err;
}

TEST(ResultsCmd, SortDirectionFlags) {
  Store st;
  ASSERT_EQ(st.sweep(kMedianSweep).code, 0);
  auto loss = [](const nlohmann::json& rows) {
    std::vector<double> v;
    for (const auto& r : rows) v.push_back(r["val_loss"].get<double>());
    return v;
  };
  auto up =
      loss(nlohmann::json::parse(run("results med --sort val_loss --json --store " + st.url).out));
  Result d = run("results med --sort val_loss --descending --json --store " + st.url);
  ASSERT_EQ(d.code, 0) << d.err;
  auto down = loss(nlohmann::json::parse(d.out));
  ASSERT_EQ(up.size(), 5u);
  EXPECT_TRUE(std::is_sorted(up.begin(), up.end()));
  EXPECT_TRUE(std::is_sorted(down.rbegin(), down.rend()));
  EXPECT_GT(down.front(), down.back());
  auto acc_up = nlohmann::json::parse(run("results med --ascending --json --store " + st.url).out);
  EXPECT_LE(acc_up[0]["val_acc"].get<double>(), acc_up[4]["val_acc"].get<double>());
  EXPECT_EQ(run("results med --ascending --descending --store " + st.url).code, 2);
  Result bad = run("results med --sort nope --store " + st.url);
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("nope"), std::string::npos) << bad.err;
}

TEST(WorkerCmd, UnknownExperimentAndNegativeIdleExitAreErrors) {
  Store st;
  Result w = run("worker --experiment 77 --store " + st.url);
  EXPECT_EQ(w.code, 2) << w.err;
  EXPECT_NE(w.err.find("77"), std::string::npos) << w.err;
  Result i = run("worker --idle-exit -1 --experiment 77 --store " + st.url);
  EXPECT_EQ(i.code, 2) << i.err;
  EXPECT_NE(i.err.find("--idle-exit"), std::string::npos) << i.err;
}

TEST(CliUsage, EveryUsageErrorExitsTwoWithAReadableMessage) {
  struct Case {
    std::string args, expect;
  };
  for (const Case& c : std::vector<Case>{
           {"rerun abc", "trial"},
           {"rerun 0", "trial"},
           {"rerun", "trial"},
           {"results", "experiment"},
           {"results x --top -1", "--top"},
           {"run -w 0 x.yaml", "--workers"},
           {"run --lease 0 x.yaml", "--lease"},
           {"run", "sweep"},
           {"train", "spec"},
           {"train x.yaml --bogus", "--bogus"},
           {"worker --lease abc", "--lease"},
           {"worker --slots 0", "--slots"},
           {"nosuchcommand", ""},
       }) {
    Result r = run(c.args);
    EXPECT_EQ(r.code, 2) << c.args << ": " << r.err;
    EXPECT_NE(r.err.find(c.expect), std::string::npos) << c.args << ": " << r.err;
    EXPECT_EQ(r.err.find("1.797"), std::string::npos) << c.args << ": " << r.err;
  }
  EXPECT_EQ(run("--help").code, 0);
  EXPECT_EQ(run("results --help").code, 0);
  EXPECT_EQ(run("--version").code, 0);
}

// --version is experiment::version_text(): the facts /api/stats' "build" and
// every trial's provenance carry (tests/install/install_test.sh compares the
// three through an installed binary).
TEST(CliUsage, VersionNamesTheBuildTheCompilerAndTheKernelTargets) {
  Result r = run("--version");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out.rfind(std::string("dnnlab ") + dnnlab::build::kVersion + "\n", 0), 0u) << r.out;
  EXPECT_NE(r.out.find(std::string("\nbuild ") + dnnlab::build::kGitId + " ("), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find(std::string("\ncompiler ") + dnnlab::build::kCompiler + "\n"),
            std::string::npos)
      << r.out;
  for (std::string_view t : dnnlab::nn::kernel_targets())
    EXPECT_NE(r.out.find(std::string(t)), std::string::npos) << t << " in " << r.out;
}

TEST(RunCmd, InterruptedResumeHintNamesTheExperiment) {
  Store st;
  auto yaml = small_sweep("long", "    lr: [0.01, 0.02]\n", "${lr}");
  yaml.replace(yaml.find("epochs: 2"), 9, "epochs: 1000000");
  yaml.replace(yaml.find("limit_train: 128"), 16, "limit_train: 20000");
  st.dir.write("long.yaml", yaml);
  auto s = st.open();
  auto interrupt_when_running = [&](std::vector<std::string> args) {
    pid_t pid = spawn(st.dir.path, args);
    const auto end = std::chrono::steady_clock::now() + 120s;
    bool running = false;
    while (!running && std::chrono::steady_clock::now() < end) {
      std::this_thread::sleep_for(100ms);
      auto exps = s->experiments();
      running = !exps.empty() && s->trial_counts(exps[0].id).running > 0;
    }
    EXPECT_TRUE(running) << slurp(st.dir.path / "log.txt");
    kill(pid, SIGINT);
    int status = 0;
    waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 130) << slurp(st.dir.path / "log.txt");
  };
  interrupt_when_running({"run", "-q", "-w", "1", "--no-server", "--store", st.url, "long.yaml"});
  // Wait for the worker to give its trial back, then resume and interrupt again.
  for (int i = 0; i < 300 && s->trial_counts(1).running > 0; ++i)
    std::this_thread::sleep_for(100ms);
  std::filesystem::remove(st.dir.path / "log.txt");
  interrupt_when_running(
      {"run", "-q", "-w", "1", "--no-server", "--store", st.url, "--resume", "1"});
  const std::string log = slurp(st.dir.path / "log.txt");
  EXPECT_NE(log.find("`dnnlab run --resume 1`"), std::string::npos) << log;
  EXPECT_EQ(log.find("`dnnlab run `"), std::string::npos) << log;
}

}  // namespace
}  // namespace dnnlab::cli_test
