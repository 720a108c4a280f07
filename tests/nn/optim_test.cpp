// Optimizer steps against values computed by hand (PyTorch's update rules),
// and the learning-rate schedules.
#include "nn/optim.hpp"

#include <gtest/gtest.h>

namespace dnnlab::nn {
namespace {

std::vector<float> run(OptimizerSpec spec) {
  Param p;
  p.value.resize(Shape{3});
  p.grad.resize(Shape{3});
  const float w0[3] = {1.f, -2.f, 0.5f};
  const float g[2][3] = {{0.1f, 0.2f, -0.3f}, {0.3f, -0.1f, 0.f}};
  for (int i = 0; i < 3; ++i) p.value[i] = w0[i];
  Optimizer opt(spec, {&p});
  for (auto& step : g) {
    for (int i = 0; i < 3; ++i) p.grad[i] = step[i];
    opt.step();
  }
  return {p.value[0], p.value[1], p.value[2]};
}

void expect_values(const std::vector<float>& got, std::initializer_list<double> want) {
  int i = 0;
  for (double w : want) EXPECT_NEAR(got[i++], w, 2e-6) << "element " << i - 1;
}

TEST(Optimizer, SgdMomentumWeightDecay) {
  OptimizerSpec s{.type = "sgd", .lr = 0.1f, .momentum = 0.9f, .weight_decay = 0.01f};
  expect_values(run(s), {0.948111, -2.022182, 0.5555205});
}

TEST(Optimizer, SgdNesterov) {
  OptimizerSpec s{
      .type = "sgd", .lr = 0.1f, .momentum = 0.9f, .nesterov = true, .weight_decay = 0.01f};
  expect_values(run(s), {0.91132971, -2.02591502, 0.578888505});
}

TEST(Optimizer, PlainSgd) {
  OptimizerSpec s{.type = "sgd", .lr = 0.5f};
  expect_values(run(s), {1 - 0.5 * 0.4, -2 - 0.5 * 0.1, 0.5 + 0.5 * 0.3});
}

TEST(Optimizer, Adam) {
  OptimizerSpec s{.type = "adam", .lr = 0.01f};
  expect_values(run(s), {0.9808221902, -2.0126633697, 0.5167005819});
}

TEST(Optimizer, AdamL2WeightDecay) {
  OptimizerSpec s{.type = "adam", .lr = 0.01f, .weight_decay = 0.1f};
  expect_values(run(s), {0.9803455136, -1.9925586321, 0.5150771118});
}

TEST(Optimizer, AdamWDecoupledWeightDecay) {
  OptimizerSpec s{.type = "adamw", .lr = 0.01f, .weight_decay = 0.1f};
  expect_values(run(s), {0.9788331902, -2.0086553697, 0.5156910819});
}

// AdaGrad and RMSprop against their PyTorch rules, computed by hand in
// float64 (torch.optim.Adagrad / RMSprop formulas: eps added after the
// square root, the accumulator starting at initial_accumulator_value,
// weight decay added to the gradient, lr / (1 + (t-1) lr_decay)).
TEST(Optimizer, AdagradDefaults) {
  OptimizerSpec s{.type = "adagrad", .lr = 0.1f, .eps = 1e-10f};
  expect_values(run(s), {0.8051316703, -2.05527864, 0.6});
}

TEST(Optimizer, AdagradDecayWeightDecayInitialAccumulatorEps) {
  OptimizerSpec s{.type = "adagrad", .lr = 0.1f, .weight_decay = 0.1f, .eps = 1e-3f};
  s.lr_decay = 0.5f;
  s.initial_accumulator = 0.2f;
  expect_values(run(s), {0.9174203069, -1.96292977, 0.5416146124});
}

TEST(Optimizer, RmspropDefaults) {
  OptimizerSpec s{.type = "rmsprop", .lr = 0.01f};
  expect_values(run(s), {0.8050843305, -2.055098645, 0.5999999667});
}

TEST(Optimizer, RmspropMomentumWeightDecay) {
  OptimizerSpec s{
      .type = "rmsprop", .lr = 0.01f, .momentum = 0.9f, .weight_decay = 0.1f, .eps = 1e-3f};
  s.alpha = 0.9f;
  expect_values(run(s), {0.9125253684, -1.96870708, 0.5525097638});
}

TEST(Optimizer, RmspropCentered) {
  OptimizerSpec s{.type = "rmsprop", .lr = 0.01f, .eps = 1e-3f};
  s.alpha = 0.9f;
  s.centered = true;
  expect_values(run(s), {0.935322428, -2.018156272, 0.532967033});
}

TEST(Schedule, StepCosineAndWarmup) {
  ScheduleSpec step{.type = "step", .step_epochs = 2, .gamma = 0.5f};
  EXPECT_FLOAT_EQ(scheduled_lr(1.f, step, 0, 10), 1.f);
  EXPECT_FLOAT_EQ(scheduled_lr(1.f, step, 1, 10), 1.f);
  EXPECT_FLOAT_EQ(scheduled_lr(1.f, step, 2, 10), 0.5f);
  EXPECT_FLOAT_EQ(scheduled_lr(1.f, step, 5, 10), 0.25f);
  ScheduleSpec cos{.type = "cosine", .min_lr = 0.1f};
  EXPECT_FLOAT_EQ(scheduled_lr(1.f, cos, 0, 10), 1.f);
  EXPECT_NEAR(scheduled_lr(1.f, cos, 5, 10), 0.55f, 1e-6);
  EXPECT_LT(scheduled_lr(1.f, cos, 9, 10), 0.13f);
  ScheduleSpec warm{.type = "constant", .warmup_epochs = 3};
  EXPECT_FLOAT_EQ(scheduled_lr(1.f, warm, 0, 10), 0.25f);
  EXPECT_FLOAT_EQ(scheduled_lr(1.f, warm, 2, 10), 0.75f);
  EXPECT_FLOAT_EQ(scheduled_lr(1.f, warm, 3, 10), 1.f);
}

}  // namespace
}  // namespace dnnlab::nn
