// The features step's weighting rule (by rows and age) and its weighted sum.
#include "hybrid/aggregate.hpp"

#include <gtest/gtest.h>

#include <cstring>

namespace dnnlab::hybrid {
namespace aggregate_test {

TEST(HybridAggregate, WeightsByRowsAndAge) {
  const std::vector<GradientShare> fresh{{64, 0}};
  EXPECT_EQ(mix_weights(fresh).grad, std::vector<float>{1.0f});  // exactly: bitwise standalone
  const std::vector<GradientShare> two{{48, 0}, {16, 0}};
  EXPECT_FLOAT_EQ(mix_weights(two).grad[0], 0.75f);
  EXPECT_FLOAT_EQ(mix_weights(two).grad[1], 0.25f);
  // One version old: half the weight, and the step shrinks (the sum is < 1).
  const std::vector<GradientShare> stale{{32, 0}, {32, 1}};
  const MixWeights w = mix_weights(stale);
  EXPECT_FLOAT_EQ(w.grad[0], 0.5f);
  EXPECT_FLOAT_EQ(w.grad[1], 0.25f);
  EXPECT_FLOAT_EQ(w.state[0], 2.f / 3);  // state: a mean, normalised
  EXPECT_FLOAT_EQ(w.state[1], 1.f / 3);
}

TEST(HybridAggregate, WeightedSumOfOneIsACopy) {
  nn::Tensor a(nn::Shape{3}), b(nn::Shape{3}), dst(nn::Shape{3});
  a[0] = 1.1f, a[1] = -0.f, a[2] = 3e-30f;
  b[0] = 2, b[1] = 4, b[2] = 6;
  const std::vector<const nn::Tensor*> one{&a};
  const std::vector<float> w1{1.f};
  weighted_sum(dst, one, w1);
  EXPECT_EQ(std::memcmp(dst.data(), a.data(), 12), 0);
  const std::vector<const nn::Tensor*> both{&a, &b};
  const std::vector<float> w2{0.5f, 0.25f};
  weighted_sum(dst, both, w2);
  EXPECT_FLOAT_EQ(dst[0], 0.55f + 0.5f);
  EXPECT_FLOAT_EQ(dst[2], 1.5f);
}

}  // namespace aggregate_test
}  // namespace dnnlab::hybrid
