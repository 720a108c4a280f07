// `dnnlab report` on a real sweep: the HTML's plotted points are the store's
// trials at the store's values, the Markdown's bests and fit are the ones
// computed here from the store, and nothing in the HTML is fetched.
#include <cmath>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "cli_util.hpp"
#include "store/result_store.hpp"

namespace dnnlab::cli_test {
namespace report_cmd_test {

// A depth study in miniature; some of its trials end pruned.
std::string depth_sweep() {
  return slurp(std::string(DNNLAB_SOURCE_DIR) + "/tests/report/fixtures/small-depth-sweep.yaml");
}

struct ReportStore {
  TempDir dir;
  std::string url = "sqlite:" + (dir.path / "t.db").string();
  Result sweep(const std::string& yaml) {
    return run("run -q -w 1 --no-server --store " + url + " " +
               dir.write("sweep.yaml", yaml).string());
  }
};

struct Point {
  std::string status;
  double x = 0, y = 0;
};

// The accuracy figures' points by trial id.
std::map<std::int64_t, Point> accuracy_points(const std::string& html) {
  std::map<std::int64_t, Point> out;
  std::size_t at = 0;
  while ((at = html.find("<svg", at)) != std::string::npos) {
    const std::size_t end = html.find("</svg>", at);
    const std::string svg = html.substr(at, end - at);
    at = end;
    if (svg.find("id=\"accuracy-") == std::string::npos) continue;
    std::regex pt(
        R"re(<circle class="pt (\w+)" data-trial="(\d+)" data-x="([^"]+)" data-y="([^"]+)")re");
    for (auto it = std::sregex_iterator(svg.begin(), svg.end(), pt); it != std::sregex_iterator();
         ++it)
      out[std::stoll((*it)[2])] = {(*it)[1], std::stod((*it)[3]), std::stod((*it)[4])};
  }
  return out;
}

std::string f4(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.4f", v);
  return b;
}

TEST(ReportCmd, PlotsAndNumbersAreTheStores) {
  ReportStore s;
  auto r = s.sweep(depth_sweep());
  ASSERT_EQ(r.code, 0) << r.err;
  auto out = s.dir.path / "report";
  r = run("report rep --store " + s.url + " --out " + out.string());
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string html = slurp(out / "rep-report.html");
  const std::string md = slurp(out / "rep-report.md");
  ASSERT_FALSE(html.empty());
  ASSERT_FALSE(md.empty());

  auto store = store::open_result_store(s.url);
  const auto exps = store->experiments();
  ASSERT_EQ(exps.size(), 1u);
  auto trials = all_trials(*store, exps[0].id);
  ASSERT_EQ(trials.size(), 12u);
  const auto points = accuracy_points(html);
  // (depth, activation) -> best accuracy; every trial's point where the store has it.
  std::map<std::pair<int, std::string>, double> best;
  std::vector<double> xs, ys;
  int pruned = 0;
  for (const auto& t : trials) {
    auto full = store->trial(t.id);
    ASSERT_TRUE(full);
    auto cfg = nlohmann::json::parse(t.config_json);
    const int depth = cfg["depth"];
    std::optional<double> acc =
        t.status == store::TrialStatus::finished
            ? t.metrics.val_acc
            : (full->curve.empty() ? std::nullopt : full->curve.back().val_acc);
    pruned += t.status == store::TrialStatus::pruned;
    ASSERT_TRUE(acc) << "trial " << t.id;
    ASSERT_TRUE(points.count(t.id)) << "trial " << t.id << " is not drawn";
    const Point& p = points.at(t.id);
    EXPECT_EQ(p.status, std::string(store::to_string(t.status)));
    EXPECT_EQ(p.x, depth);
    EXPECT_NEAR(p.y, *acc, 1e-8) << "trial " << t.id;
    auto key = std::make_pair(depth, cfg["activation"].get<std::string>());
    best[key] = std::max(best.count(key) ? best[key] : 0.0, *acc);
    double secs = 0;
    for (const auto& e : full->curve) secs += e.seconds;
    xs.push_back(depth);
    ys.push_back(secs / static_cast<double>(full->curve.size()));
  }
  EXPECT_EQ(points.size(), trials.size());
  EXPECT_GT(pruned, 0)
      << "the median rule pruned nothing: the sweep no longer covers pruned trials";
  EXPECT_NE(html.find("at epoch"), std::string::npos);  // pruned trials' tooltips say where

  // The Markdown's best per depth and activation.
  for (int depth : {1, 2, 4}) {
    std::regex row("\\| " + std::to_string(depth) + " \\| ([0-9.]+) \\| ([0-9.]+) \\|");
    std::smatch m;
    ASSERT_TRUE(std::regex_search(md, m, row)) << md;
    EXPECT_EQ(m[1].str(), f4(best[{depth, "relu"}])) << "depth " << depth;
    EXPECT_EQ(m[2].str(), f4(best[{depth, "tanh"}])) << "depth " << depth;
  }
  // The fit of seconds per epoch against depth, every trial.
  double mx = 0, my = 0;
  for (std::size_t i = 0; i < xs.size(); ++i) mx += xs[i] / xs.size(), my += ys[i] / ys.size();
  double sxx = 0, sxy = 0, syy = 0;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    sxx += (xs[i] - mx) * (xs[i] - mx);
    sxy += (xs[i] - mx) * (ys[i] - my);
    syy += (ys[i] - my) * (ys[i] - my);
  }
  const double slope = sxy / sxx, r2 = sxy * sxy / (sxx * syy);
  std::smatch fit;
  ASSERT_TRUE(std::regex_search(
      md, fit, std::regex(R"(\| all \| ([-0-9.e+]+) \| [-0-9.e+]+ \| ([0-9.]+) \| 12 \|)")))
      << md;
  EXPECT_NEAR(std::stod(fit[1]), slope, std::abs(slope) * 1e-3 + 1e-12);
  EXPECT_NEAR(std::stod(fit[2]), r2, 1e-4);
  EXPECT_NE(md.find("1/classes = 0.1000"), std::string::npos) << md;  // synthetic: 10 classes

  // Self-contained: no scripts, nothing to fetch.
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("src="), std::string::npos);
  EXPECT_EQ(html.find("href="), std::string::npos);
  EXPECT_NE(html.find("default-src 'none'"), std::string::npos);
}

TEST(ReportCmd, SweepWithoutDepthSaysWhatStandsIn) {
  ReportStore s;
  const std::string yaml = R"(name: widths
template:
  data: {dataset: synthetic, limit_train: 128, validation: 32}
  model:
    layers:
      - dense: ${width}
        activation: relu
      - dense: 10
  train:
    epochs: 1
    batch_size: 32
    optimizer: {type: sgd, lr: 0.1}
search:
  method: grid
  parameters:
    width: [8, 16]
)";
  ASSERT_EQ(s.sweep(yaml).code, 0);
  auto r = run("report widths --store " + s.url + " --out " + s.dir.path.string());
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string md = slurp(s.dir.path / "widths-report.md");
  EXPECT_NE(md.find("numeric parameter width stands in for depth"), std::string::npos) << md;
  EXPECT_EQ(accuracy_points(slurp(s.dir.path / "widths-report.html")).size(), 2u);
  EXPECT_EQ(run("report nosuch --store " + s.url).code, 2);
}

}  // namespace report_cmd_test
}  // namespace dnnlab::cli_test
