// The report's numbers on hand-made data with known answers: the least-squares
// fit and R², bests per depth, the chance and plateau rules, and a small
// study's analysis (gaps, fits per family, best per depth, conclusions).
#include "report/study.hpp"

#include <gtest/gtest.h>

namespace dnnlab::report {
namespace study_test {

TEST(ReportFit, ExactLine) {
  auto f = least_squares({1, 2, 3, 4}, {3, 5, 7, 9});
  ASSERT_TRUE(f);
  EXPECT_DOUBLE_EQ(f->slope, 2);
  EXPECT_DOUBLE_EQ(f->intercept, 1);
  EXPECT_DOUBLE_EQ(f->r2, 1);
  EXPECT_EQ(f->n, 4u);
}

TEST(ReportFit, NoisyLineHasKnownR2) {
  // sxx = 5, sxy = 4, syy = 5: slope 0.8, intercept 2.5 - 0.8 * 1.5, R² = 16/25.
  auto f = least_squares({0, 1, 2, 3}, {1, 3, 2, 4});
  ASSERT_TRUE(f);
  EXPECT_NEAR(f->slope, 0.8, 1e-12);
  EXPECT_NEAR(f->intercept, 1.3, 1e-12);
  EXPECT_NEAR(f->r2, 0.64, 1e-12);
}

TEST(ReportFit, TooFewOrDegenerate) {
  EXPECT_FALSE(least_squares({1}, {2}));
  EXPECT_FALSE(least_squares({2, 2, 2}, {1, 2, 3}));
  auto flat = least_squares({1, 2, 3}, {4, 4, 4});
  ASSERT_TRUE(flat);
  EXPECT_DOUBLE_EQ(flat->slope, 0);
  EXPECT_DOUBLE_EQ(flat->r2, 1);
}

TEST(ReportBest, LargestPerDepthByDepth) {
  auto b = best_per_depth({{8, 0.3}, {1, 0.5}, {8, 0.6}, {1, 0.2}, {2, 0.4}});
  std::vector<DepthValue> want = {{1, 0.5}, {2, 0.4}, {8, 0.6}};
  EXPECT_EQ(b, want);
}

TEST(ReportChance, ShallowestDepthFromWhichAllStayAtChance) {
  // chance 0.1: at chance means <= 0.1 + 0.1 * 0.9 = 0.19.
  EXPECT_TRUE(at_chance(0.19, 0.1));
  EXPECT_FALSE(at_chance(0.2, 0.1));
  EXPECT_EQ(chance_depth({{1, 0.8}, {8, 0.7}, {64, 0.15}, {128, 0.1}, {700, 0.12}}, 0.1), 64.0);
  // A deeper depth that learned again moves it past that.
  EXPECT_EQ(chance_depth({{1, 0.8}, {64, 0.15}, {128, 0.25}, {700, 0.1}}, 0.1), 700.0);
  EXPECT_FALSE(chance_depth({{1, 0.8}, {64, 0.15}, {700, 0.5}}, 0.1));
  EXPECT_EQ(chance_depth({{2, 0.5}, {4, 0.55}}, 0.5), 2.0);  // two classes, all at chance
  EXPECT_FALSE(chance_depth({}, 0.1));
}

TEST(ReportPlateau, Rules) {
  auto p = find_plateau({{1, 0.5}, {2, 0.7}, {4, 0.805}, {8, 0.81}, {16, 0.808}});
  EXPECT_EQ(p.kind, Plateau::Kind::plateau);
  EXPECT_EQ(p.peak_depth, 4);
  EXPECT_DOUBLE_EQ(p.peak, 0.81);

  p = find_plateau({{1, 0.5}, {4, 0.8}, {16, 0.85}, {64, 0.6}, {256, 0.1}});
  EXPECT_EQ(p.kind, Plateau::Kind::declines);
  EXPECT_EQ(p.peak_depth, 16);
  EXPECT_EQ(p.falls_at, 64);

  EXPECT_EQ(find_plateau({{1, 0.5}, {2, 0.6}, {4, 0.7}}).kind, Plateau::Kind::rising);
  EXPECT_EQ(find_plateau({{1, 0.5}, {2, 0.6}}).kind, Plateau::Kind::too_few);
  // A wider tolerance turns the decline into a plateau.
  Rules loose;
  loose.plateau_tolerance = 0.3;
  EXPECT_EQ(find_plateau({{1, 0.5}, {4, 0.8}, {16, 0.85}, {64, 0.6}}, loose).kind,
            Plateau::Kind::plateau);
}

TrialRow row(std::int64_t id, const std::string& family, double depth, double acc,
             double epoch_seconds, const std::string& status = "finished") {
  TrialRow t;
  t.id = id;
  t.index = id - 1;
  t.family = family;
  t.activation = "relu";
  t.depth = depth;
  t.accuracy = acc;
  t.status = status;
  t.epochs = 2;
  t.epoch_seconds = epoch_seconds;
  t.sample_seconds = epoch_seconds / 1000;
  t.params = "family=" + family + ", depth=" + std::to_string(static_cast<int>(depth));
  return t;
}

TEST(ReportAnalyse, SmallStudyKnownAnswers) {
  Study s;
  s.name = "hand";
  s.depth_param = "depth";
  s.family_param = "family";
  s.activation_param = "activation";
  s.families = {"plain", "residual"};
  s.activations = {"relu"};
  s.classes = 10;
  s.samples = 1000;
  // plain: learns at 1 and 4, at chance from 16; time = 0.5 + 0.25 depth.
  // residual: learns everywhere; time = 1 + 0.5 depth.
  s.trials = {row(1, "plain", 1, 0.80, 0.75),           row(2, "plain", 4, 0.82, 1.5),
              row(3, "plain", 16, 0.11, 4.5, "pruned"), row(4, "plain", 64, 0.10, 16.5, "pruned"),
              row(5, "residual", 1, 0.79, 1.5),         row(6, "residual", 4, 0.84, 3),
              row(7, "residual", 16, 0.845, 9),         row(8, "residual", 64, 0.85, 33)};
  TrialRow failed = row(9, "plain", 64, 0, 0, "failed");
  failed.accuracy.reset();
  failed.epoch_seconds.reset();
  failed.sample_seconds.reset();
  s.trials.push_back(failed);
  TrialRow unverified = row(10, "residual", 64, 0.99, 33);
  unverified.provisional = true;
  s.trials.push_back(unverified);

  Analysis a = analyse(s);
  ASSERT_EQ(a.families.size(), 2u);
  const FamilyResult& plain = a.families[0];
  const FamilyResult& res = a.families[1];
  EXPECT_EQ(plain.overall.chance_depth, 16.0);
  EXPECT_FALSE(res.overall.chance_depth);
  EXPECT_EQ(plain.overall.plateau.kind, Plateau::Kind::declines);
  EXPECT_EQ(res.overall.plateau.kind, Plateau::Kind::plateau);
  EXPECT_EQ(res.overall.plateau.peak_depth, 4);  // 0.84 is within 0.01 of 0.85
  ASSERT_TRUE(plain.epoch_fit && res.epoch_fit);
  EXPECT_NEAR(plain.epoch_fit->slope, 0.25, 1e-12);
  EXPECT_NEAR(plain.epoch_fit->intercept, 0.5, 1e-12);
  EXPECT_NEAR(plain.epoch_fit->r2, 1, 1e-12);
  EXPECT_NEAR(res.epoch_fit->slope, 0.5, 1e-12);
  EXPECT_EQ(res.epoch_fit->n, 4u);  // the unverified trial is not timed
  EXPECT_NEAR(res.sample_fit->slope, 0.0005, 1e-15);
  EXPECT_EQ(a.plain_family, "plain");
  ASSERT_EQ(res.gap.size(), 4u);
  EXPECT_NEAR(res.gap[3].value, 0.75, 1e-12);  // 0.85 - 0.10 at depth 64
  EXPECT_NEAR(res.gap[0].value, -0.01, 1e-12);
  EXPECT_TRUE(plain.gap.empty());
  // The best trial per depth over every family, never the unverified one.
  ASSERT_EQ(a.best.size(), 4u);
  EXPECT_EQ(s.trials[a.best[0].trial].id, 1);
  EXPECT_EQ(s.trials[a.best[1].trial].id, 6);
  EXPECT_EQ(s.trials[a.best[3].trial].id, 8);
  ASSERT_EQ(a.series.size(), 2u);
  EXPECT_EQ(a.series[0].best.size(), 4u);  // the failed trial adds no depth
  // The conclusions say it in words.
  std::string all;
  for (const auto& c : a.conclusions) all += c + "\n";
  EXPECT_NE(all.find("family plain: falls to chance (0.1000) from depth 16"), std::string::npos)
      << all;
  EXPECT_NE(all.find("family residual: stays above chance"), std::string::npos) << all;
  EXPECT_NE(all.find("+0.7500 at depth 64"), std::string::npos) << all;
  EXPECT_NE(all.find("costs 0.25 s per epoch"), std::string::npos) << all;
}

}  // namespace study_test
}  // namespace dnnlab::report
