// Samplers: grid order, seeded stability, ranges, TPE concentrating, trial seeds, restarts.
#include "sweep/sampler.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "test_files.hpp"

namespace dnnlab::sweep {
namespace {

using testing::TempDir;

// A sweep whose template uses every parameter in its name only (so any values
// pass the run-spec checks).
SweepSpec sweep_with(const std::string& method, const std::string& parameters,
                     const std::vector<std::string>& names, const std::string& extra = "") {
  std::string name = "r";
  for (const std::string& n : names) name += "-${" + n + "}";
  std::string text = "name: s\ntemplate:\n  name: \"" + name +
                     "\"\n  model: {layers: [{dense: 10}]}\nsearch:\n  method: " + method + "\n" +
                     extra + "  parameters:\n" + parameters;
  TempDir dir;
  return load_sweep(dir.write("s.yaml", text));
}

std::vector<TrialConfig> drain(Sampler& s) {
  std::vector<TrialConfig> out;
  while (auto t = s.next()) out.push_back(*t);
  return out;
}

TEST(GridSampler, CartesianProductInOrder) {
  SweepSpec s =
      sweep_with("grid", "    a: [1, 2]\n    b: [x, y, z]\n    c: {int: [10, 30], step: 10}\n",
                 {"a", "b", "c"});
  GridSampler grid(s.search);
  EXPECT_EQ(grid.size(), 18u);
  std::vector<TrialConfig> trials = drain(grid);
  ASSERT_EQ(trials.size(), 18u);
  size_t i = 0;
  for (int a : {1, 2})
    for (const char* b : {"x", "y", "z"})
      for (int c : {10, 20, 30}) {
        nlohmann::json want = {{"a", a}, {"b", b}, {"c", c}};
        EXPECT_EQ(trials[i].params, want) << i;
        EXPECT_EQ(trials[i].index, static_cast<int64_t>(i));
        ++i;
      }
}

TEST(GridSampler, BudgetCapsAndUngriddableIsAnError) {
  SweepSpec s =
      sweep_with("grid", "    a: [1, 2, 3]\n    b: [4, 5]\n", {"a", "b"}, "  budget: 4\n");
  GridSampler grid(s.search);
  EXPECT_EQ(drain(grid).size(), 4u);

  SweepSpec r = sweep_with("random", "    a: [1, 2]\n    lr: {uniform: [0.1, 0.2]}\n", {"a", "lr"},
                           "  budget: 4\n");
  try {
    GridSampler bad(r.search);
    FAIL();
  } catch (const SpecError& e) {
    EXPECT_EQ(e.field(), "search.parameters.lr");
    EXPECT_EQ(e.where().line, 10);
  }
}

const std::string kMixed =
    "    a: [relu, tanh, sigmoid]\n"
    "    w: {int: [8, 64], step: 8}\n"
    "    n: {int: [1, 5]}\n"
    "    u: {uniform: [-1, 1]}\n"
    "    lr: {loguniform: [1.0e-5, 1.0]}\n";
const std::vector<std::string> kMixedNames = {"a", "w", "n", "u", "lr"};

void expect_in_ranges(const TrialConfig& t) {
  EXPECT_TRUE(t.params["a"] == "relu" || t.params["a"] == "tanh" || t.params["a"] == "sigmoid");
  int64_t w = t.params["w"];
  EXPECT_TRUE(w >= 8 && w <= 64 && w % 8 == 0) << w;
  int64_t n = t.params["n"];
  EXPECT_TRUE(n >= 1 && n <= 5) << n;
  double u = t.params["u"];
  EXPECT_TRUE(u >= -1 && u <= 1) << u;
  double lr = t.params["lr"];
  EXPECT_TRUE(lr >= 1e-5 && lr <= 1.0) << lr;
}

TEST(RandomSampler, StableForASeedAndWithinRanges) {
  SweepSpec s = sweep_with("random", kMixed, kMixedNames, "  budget: 400\n  seed: 7\n");
  RandomSampler a(s.search), b(s.search);
  std::vector<TrialConfig> ta = drain(a), tb = drain(b);
  ASSERT_EQ(ta.size(), 400u);
  ASSERT_EQ(tb.size(), 400u);
  int below_midpoint = 0;
  for (size_t i = 0; i < ta.size(); ++i) {
    EXPECT_EQ(ta[i].params, tb[i].params);
    EXPECT_EQ(ta[i].seed, tb[i].seed);
    expect_in_ranges(ta[i]);
    below_midpoint += ta[i].params["lr"].get<double>() < std::pow(10.0, -2.5) ? 1 : 0;
  }
  // Log scale: half the draws fall below the geometric midpoint 10^-2.5
  // (a linear scale would put 0.3% there).
  EXPECT_GT(below_midpoint, 160);
  EXPECT_LT(below_midpoint, 240);

  SearchSpec other = s.search;
  other.seed = 8;
  RandomSampler c(other);
  std::vector<TrialConfig> tc = drain(c);
  int same = 0;
  for (size_t i = 0; i < tc.size(); ++i) same += tc[i].params == ta[i].params ? 1 : 0;
  EXPECT_LT(same, 5);
}

TEST(RandomSampler, SmallDiscreteSpaceIsNotRepeated) {
  SweepSpec s =
      sweep_with("random", "    a: [1, 2, 3]\n    b: [x, y]\n", {"a", "b"}, "  budget: 100\n");
  RandomSampler r(s.search);
  std::vector<TrialConfig> t = drain(r);
  ASSERT_EQ(t.size(), 6u);
  std::set<std::string> distinct;
  for (const TrialConfig& c : t) distinct.insert(c.params.dump());
  EXPECT_EQ(distinct.size(), 6u);
}

TEST(RandomSampler, ResumeContinuesTheSameSequence) {
  SweepSpec s = sweep_with("random", kMixed, kMixedNames, "  budget: 20\n");
  RandomSampler whole(s.search);
  std::vector<TrialConfig> all = drain(whole);
  RandomSampler restarted(s.search);
  for (int i = 0; i < 8; ++i) restarted.resume(all[i]);
  std::vector<TrialConfig> rest = drain(restarted);
  ASSERT_EQ(rest.size(), 12u);
  for (size_t i = 0; i < rest.size(); ++i) EXPECT_EQ(rest[i].params, all[i + 8].params);
}

// The synthetic objective: best at lr = 1e-2.
double objective(const TrialConfig& t) {
  double x = std::log10(t.params["lr"].get<double>());
  return -(x + 2) * (x + 2);
}

std::vector<TrialConfig> run_loop(Sampler& s, int trials) {
  std::vector<TrialConfig> out;
  for (int i = 0; i < trials; ++i) {
    auto t = s.next();
    if (!t) break;
    s.observe(t->index, objective(*t));
    out.push_back(*t);
  }
  return out;
}

double mean_distance_of_last(const std::vector<TrialConfig>& t, size_t last) {
  double d = 0;
  for (size_t i = t.size() - last; i < t.size(); ++i)
    d += std::abs(std::log10(t[i].params["lr"].get<double>()) + 2);
  return d / static_cast<double>(last);
}

TEST(TpeSampler, StableForASeedAndWithinRanges) {
  SweepSpec s = sweep_with("tpe", kMixed, kMixedNames, "  budget: 40\n  seed: 3\n");
  TpeSampler a(s.search), b(s.search);
  std::vector<TrialConfig> ta = run_loop(a, 40), tb = run_loop(b, 40);
  ASSERT_EQ(ta.size(), 40u);
  for (size_t i = 0; i < ta.size(); ++i) {
    EXPECT_EQ(ta[i].params, tb[i].params) << i;
    expect_in_ranges(ta[i]);
  }
  SearchSpec other = s.search;
  other.seed = 4;
  TpeSampler c(other);
  std::vector<TrialConfig> tc = run_loop(c, 40);
  int same = 0;
  for (size_t i = 0; i < tc.size(); ++i) same += tc[i].params == ta[i].params ? 1 : 0;
  EXPECT_LT(same, 3);
}

TEST(TpeSampler, ConcentratesNearTheOptimum) {
  const std::string space = "    lr: {loguniform: [1.0e-4, 1.0e-1]}\n";
  for (uint64_t seed : {1, 2, 3}) {
    SCOPED_TRACE(seed);
    SweepSpec s =
        sweep_with("tpe", space, {"lr"}, "  budget: 60\n  seed: " + std::to_string(seed) + "\n");
    TpeSampler tpe(s.search);
    RandomSampler random(s.search);
    std::vector<TrialConfig> t = run_loop(tpe, 60), r = run_loop(random, 60);
    ASSERT_EQ(t.size(), 60u);
    double dt = mean_distance_of_last(t, 20), dr = mean_distance_of_last(r, 20);
    EXPECT_LT(dt, dr);
    EXPECT_LT(dt, 0.4);
  }
}

TEST(TpeSampler, ResumeWithObservationsContinuesTheSameSequence) {
  SweepSpec s = sweep_with("tpe", "    lr: {loguniform: [1.0e-4, 1.0e-1]}\n    a: [1, 2, 3]\n",
                           {"lr", "a"}, "  budget: 30\n");
  TpeSampler whole(s.search);
  std::vector<TrialConfig> all = run_loop(whole, 30);
  TpeSampler restarted(s.search);
  for (int i = 0; i < 15; ++i) restarted.resume(all[i]);
  for (int i = 0; i < 15; ++i) restarted.observe(all[i].index, objective(all[i]));
  std::vector<TrialConfig> rest = run_loop(restarted, 15);
  ASSERT_EQ(rest.size(), 15u);
  for (size_t i = 0; i < rest.size(); ++i) EXPECT_EQ(rest[i].params, all[i + 15].params) << i;
}

TEST(TrialSeed, StableAndDistinct) {
  EXPECT_EQ(fnv1a64(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(fnv1a64("a"), 0xaf63dc4c8601ec8cull);
  nlohmann::json p = {{"depth", 4}, {"activation", "relu"}, {"lr", 0.001}};
  // Key order does not matter: the JSON is canonical.
  nlohmann::json q;
  q["lr"] = 0.001;
  q["activation"] = "relu";
  q["depth"] = 4;
  EXPECT_EQ(trial_seed(1, p), trial_seed(1, q));
  EXPECT_EQ(trial_seed(1, p),
            nn::derive_seed(1, fnv1a64(R"({"activation":"relu","depth":4,"lr":0.001})")));
  EXPECT_NE(trial_seed(1, p), trial_seed(2, p));

  SweepSpec s = sweep_with("grid", "    a: [1, 2, 3, 4]\n    b: [x, y, z]\n", {"a", "b"});
  GridSampler g(s.search);
  std::set<uint64_t> seeds;
  for (const TrialConfig& t : drain(g)) {
    EXPECT_EQ(t.seed, trial_seed(s.search.seed, t.params));
    seeds.insert(t.seed);
  }
  EXPECT_EQ(seeds.size(), 12u);
}

}  // namespace
}  // namespace dnnlab::sweep
