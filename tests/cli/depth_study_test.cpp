// The main job's study in miniature (examples/depth-sweep-quick.yaml: plain,
// residual and normalised MLPs on the digits table): it runs to its end,
// running it again shows that experiment's results without training, and
// --new starts a second one; the report reads the families.
#include <filesystem>
#include <map>
#include <set>

#include "cli_util.hpp"
#include "store/result_store.hpp"

namespace dnnlab::cli_test::depth_study {
namespace {

constexpr char kDigits[] = "/usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz";
constexpr size_t kQuickTrials = 36;  // 4 depths x 3 families x 3 activations

// (id, attempt, epochs, val_acc) of every trial: what training would change.
std::map<int64_t, std::string> fingerprint(store::ResultStore& s, int64_t exp) {
  std::map<int64_t, std::string> out;
  for (const auto& t : all_trials(s, exp))
    out[t.id] = std::to_string(t.attempt) + "/" + std::to_string(t.metrics.epochs_done) + "/" +
                std::string(store::to_string(t.status)) + "/" + t.config_json;
  return out;
}

TEST(DepthStudy, QuickStudyRunsOnceThenShowsItsResultsAndNewStartsAnother) {
  if (!std::filesystem::exists(kDigits)) {
    if (std::getenv("CI")) FAIL() << "python3-sklearn is not installed";
    GTEST_SKIP() << "python3-sklearn is not installed";
  }
  TempDir dir;
  const std::string db = "sqlite:" + (dir.path / "t.db").string();
  const std::string sweep = std::string(DNNLAB_SOURCE_DIR) + "/examples/depth-sweep-quick.yaml";
  const std::string cmd = "run -q -w 2 --no-server --store " + db + " ";

  Result first = run(cmd + sweep);
  ASSERT_EQ(first.code, 0) << first.err;
  auto s = store::open_result_store(db);
  ASSERT_EQ(s->experiments().size(), 1u);
  const int64_t exp = s->experiments()[0].id;
  const auto before = fingerprint(*s, exp);
  ASSERT_EQ(before.size(), kQuickTrials);
  std::set<std::string> families;
  for (const auto& t : all_trials(*s, exp)) {
    EXPECT_EQ(t.status, store::TrialStatus::finished) << t.error;
    families.insert(nlohmann::json::parse(t.config_json).at("family").get<std::string>());
  }
  EXPECT_EQ(families, (std::set<std::string>{"plain", "residual", "normalised"}));

  // Again: the same experiment, nothing trained, its table printed.
  Result again = run(cmd + sweep);
  ASSERT_EQ(again.code, 0) << again.err;
  EXPECT_NE(again.err.find("experiment " + std::to_string(exp) + " (depth-sweep-quick) ran"),
            std::string::npos)
      << again.err;
  EXPECT_NE(again.err.find("--new"), std::string::npos) << again.err;
  EXPECT_NE(again.out.find("best trial per depth"), std::string::npos) << again.out;
  EXPECT_EQ(s->experiments().size(), 1u);
  EXPECT_EQ(fingerprint(*s, exp), before);

  // The report of the study, by name, groups by family.
  Result report = run("report depth-sweep-quick --store " + db + " --out " + dir.path.string());
  ASSERT_EQ(report.code, 0) << report.err;
  const std::string md = slurp(dir.path / "depth-sweep-quick-report.md");
  for (const char* f : {"plain", "residual", "normalised"})
    EXPECT_NE(md.find(f), std::string::npos) << f << "\n" << md;

  // --new: a second experiment of the same sweep, trained in full.
  Result fresh = run(cmd + "--new " + sweep);
  ASSERT_EQ(fresh.code, 0) << fresh.err;
  ASSERT_EQ(s->experiments().size(), 2u);
  const int64_t second = s->experiments()[0].id;  // newest first
  EXPECT_NE(second, exp);
  EXPECT_EQ(s->trial_counts(second).finished, static_cast<int64_t>(kQuickTrials));
  EXPECT_EQ(fingerprint(*s, exp), before);
}

}  // namespace
}  // namespace dnnlab::cli_test::depth_study
