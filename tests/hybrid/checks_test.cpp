// The tensor checks: shape, finiteness, norms against the step and history.
#include "hybrid/checks.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "nn/errors.hpp"

namespace dnnlab::hybrid {
namespace checks_test {

TEST(HybridChecks, ShapeAndFiniteness) {
  nn::Tensor t(nn::Shape{2, 2});
  EXPECT_EQ(shape_problem(t.view(), nn::Shape{2, 2}), "");
  EXPECT_NE(shape_problem(t.view(), nn::Shape{4}).find("[2,2]"), std::string::npos);
  EXPECT_EQ(finite_problem(t.view()), "");
  t[3] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_NE(finite_problem(t.view()).find("value 3"), std::string::npos);
  t[3] = std::numeric_limits<float>::infinity();
  EXPECT_NE(finite_problem(t.view()), "");
}

// The server reads a tensor once for its norm and its finiteness:
// sum_of_squares chained over tensors is l2_norm's square, bit for bit, and
// it is finite exactly when every value is.
TEST(HybridChecks, OneReadGivesTheNormAndTheFiniteness) {
  nn::Tensor a(nn::Shape{3, 5}), b(nn::Shape{7});
  for (int64_t i = 0; i < a.numel(); ++i) a[i] = 0.1f * static_cast<float>(i) - 0.7f;
  for (int64_t i = 0; i < b.numel(); ++i) b[i] = 1e19f / static_cast<float>(i + 1);
  const nn::TensorView v[] = {a.view(), b.view()};
  const double sum = sum_of_squares(b.view(), sum_of_squares(a.view()));
  EXPECT_EQ(std::sqrt(sum), l2_norm(v));
  EXPECT_TRUE(std::isfinite(sum));  // squares of 1e19 overflow a float, not a double
  b[6] = -std::numeric_limits<float>::infinity();
  EXPECT_FALSE(std::isfinite(sum_of_squares(b.view())));
  b[6] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_FALSE(std::isfinite(sum_of_squares(b.view())));
  EXPECT_NE(finite_problem(b.view()).find("value 6"), std::string::npos);
}

TEST(HybridChecks, NormAgainstTheStepMedian) {
  const CheckLimits lim;
  const NormHistory none;
  const std::vector<double> step{1.0, 1.3, 0.8, 130.0};
  EXPECT_EQ(norm_problem(0, step, none, lim), "");
  EXPECT_EQ(norm_problem(2, step, none, lim), "");
  EXPECT_NE(norm_problem(3, step, none, lim).find("median"), std::string::npos);
  const std::vector<double> with_zero{1.0, 1.1, 0.9, 0.0};
  EXPECT_NE(norm_problem(3, with_zero, none, lim), "");  // too small as well
}

TEST(HybridChecks, BelowTheStepMedianIsToldApart) {
  const CheckLimits lim;
  const std::vector<std::string> fine(4), one_nan{"", "", "value 0 is nan", ""};
  const std::vector<double> step{1.0, 1.1, 0.9, 0.1};
  EXPECT_EQ(below_step_median(fine, step, lim), (std::vector<bool>{false, false, false, true}));
  const std::vector<double> big{1.0, 1.1, 0.9, 100.0};  // too big is not "small"
  EXPECT_EQ(below_step_median(fine, big, lim), (std::vector<bool>(4, false)));
  // The non-finite one neither counts nor is small; two finite peers are too few.
  const std::vector<std::string> two_nan{"", "x", "y", ""};
  EXPECT_EQ(below_step_median(two_nan, step, lim), (std::vector<bool>(4, false)));
  EXPECT_EQ(below_step_median(one_nan, step, lim), (std::vector<bool>{false, false, false, true}));
}

TEST(HybridChecks, HistoryCondemnsOnlyWhenAnotherStaysWithinIt) {
  const CheckLimits lim;
  const NormHistory none;
  // Two contributions: no majority in the step, so only the history.
  const std::vector<double> pair{1.0, 100.0};
  EXPECT_EQ(norm_problem(1, pair, none, lim), "");
  NormHistory h;
  for (int i = 0; i < lim.history_min; ++i) h.add(1.0 + 0.01 * i, lim.history_size);
  EXPECT_NE(norm_problem(1, pair, h, lim).find("recent"), std::string::npos);
  EXPECT_EQ(norm_problem(0, pair, h, lim), "");
  const std::vector<double> drift{1.0, 5.0};
  EXPECT_EQ(norm_problem(1, drift, h, lim), "");  // within x20
  // Both far above the history: the model moved, not one client.
  const std::vector<double> both{90.0, 110.0};
  EXPECT_EQ(norm_problem(0, both, h, lim), "");
  EXPECT_EQ(norm_problem(1, both, h, lim), "");
  const std::vector<double> alone{100.0};
  EXPECT_EQ(norm_problem(0, alone, h, lim), "");
}

TEST(HybridChecks, HistoryKeepsTheLastN) {
  NormHistory h;
  EXPECT_EQ(h.median(1), 0);
  for (int i = 1; i <= 10; ++i) h.add(i, 3);  // keeps 8, 9, 10
  EXPECT_EQ(h.median(3), 9);
  EXPECT_EQ(h.median(4), 0);
}

TEST(HybridChecks, ScreenStepSeparatesLiesFromDivergence) {
  const CheckLimits lim;
  NormHistory h;
  const std::vector<std::string> one_nan{"", "value 0 is nan", "", ""};
  const std::vector<double> norms{1.0, 0.0, 1.2, 90.0};
  const std::vector<std::string> why = screen_step(one_nan, norms, h, lim, "activations");
  EXPECT_EQ(why[0], "");
  EXPECT_EQ(why[1], "value 0 is nan");
  EXPECT_EQ(why[2], "");
  EXPECT_NE(why[3].find("median"), std::string::npos);  // 3 finite: a majority
  EXPECT_EQ(h.median(2), 1.1);                          // the two that passed
  const std::vector<std::string> all_nan{"value 3 is inf", "value 0 is nan"};
  try {
    screen_step(all_nan, norms, h, lim, "the features' activations");
    FAIL() << "no NumericError";
  } catch (const NumericError& e) {
    EXPECT_NE(std::string(e.what()).find("diverged"), std::string::npos) << e.what();
  }
}

}  // namespace checks_test
}  // namespace dnnlab::hybrid
