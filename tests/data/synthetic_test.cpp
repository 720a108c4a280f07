// The generated "synthetic" data set: sizes, determinism, learnable labels.
#include <gtest/gtest.h>

#include <cstring>

#include "data/dataset.hpp"

namespace dnnlab::data {
namespace {

TEST(Synthetic, SizesDeterminismAndSignal) {
  LoadOptions o;
  o.name = "synthetic";
  o.limit_train = 200;
  o.validation = 300;
  Dataset a = load(o), b = load(o);
  EXPECT_EQ(a.train.size(), 200);
  EXPECT_EQ(a.val.size(), 300);
  EXPECT_EQ(a.test.size(), 300);
  EXPECT_EQ(a.sample_shape, nn::Shape{784});
  EXPECT_EQ(a.num_classes, 10);
  ASSERT_EQ(a.train.x.numel(), b.train.x.numel());
  EXPECT_EQ(0, std::memcmp(a.train.x.data(), b.train.x.data(), a.train.x.numel() * 4));
  EXPECT_EQ(a.train.y, b.train.y);
  // The label's block of features is shifted up: a nearest-block rule is exact.
  int right = 0;
  for (int64_t i = 0; i < a.test.size(); ++i) {
    const float* row = a.test.x.data() + i * 784;
    int best = 0;
    float best_sum = -1e9f;
    for (int c = 0; c < 10; ++c) {
      float sum = 0;
      for (int j = c * 78; j < c * 78 + 78; ++j) sum += row[j];
      if (sum > best_sum) best_sum = sum, best = c;
    }
    right += best == a.test.y[i];
  }
  EXPECT_GT(right, 295);
}

}  // namespace
}  // namespace dnnlab::data
