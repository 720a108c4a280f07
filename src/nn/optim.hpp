// Optimizers (SGD with momentum/Nesterov/weight decay, Adam, AdamW applied as
// one fused kernel call per parameter tensor; AdaGrad and RMSprop as plain
// loops, PyTorch's rules: torch.optim.Adagrad, torch.optim.RMSprop), and the
// learning-rate schedules (constant, step, cosine, each with optional linear
// warm-up).
//
//   nn::Optimizer opt(spec.train.optimizer, model.params());
//   model.backward_loss(x, labels);  opt.step();
#pragma once
#include <vector>

#include "nn/layer.hpp"
#include "nn/spec.hpp"

namespace dnnlab::nn {

class Optimizer {
 public:
  Optimizer(const OptimizerSpec& spec, std::vector<Param*> params);
  void step();  // applies the gradients in each Param::grad
  void set_lr(float lr) { lr_ = lr; }
  float lr() const { return lr_; }
  int64_t steps() const { return steps_; }
  // Restores the step count (Adam's bias correction, AdaGrad's decay) with
  // the state of a run continued elsewhere (the browser core's GPU backend).
  void set_steps(int64_t steps) { steps_ = steps; }
  const OptimizerSpec& spec() const { return spec_; }

 private:
  OptimizerSpec spec_;
  std::vector<Param*> params_;
  float lr_;
  int64_t steps_ = 0;
};

// Learning rate for 0-based `epoch` of `epochs`.
float scheduled_lr(float base_lr, const ScheduleSpec& s, int epoch, int epochs);

}  // namespace dnnlab::nn
