// Optimizers and learning-rate schedules.
#include "nn/optim.hpp"

#include <algorithm>
#include <cmath>

namespace dnnlab::nn {

Optimizer::Optimizer(const OptimizerSpec& spec, std::vector<Param*> params)
    : spec_(spec), params_(std::move(params)), lr_(spec.lr) {
  const bool adam = spec_.type == "adam" || spec_.type == "adamw";
  for (Param* p : params_) {
    p->state1.resize(p->value.shape());
    p->state1.zero();
    if (adam) {
      p->state2.resize(p->value.shape());
      p->state2.zero();
    }
  }
}

void Optimizer::step() {
  ++steps_;
  const Kernels& k = kernels();
  if (spec_.type == "sgd") {
    SgdParams sp{lr_, spec_.momentum, spec_.weight_decay, spec_.nesterov};
    for (Param* p : params_)
      k.sgd_step(p->value.data(), p->grad.data(), p->state1.data(), p->value.numel(), sp);
    return;
  }
  AdamParams ap{
      lr_, spec_.beta1, spec_.beta2, spec_.eps, spec_.weight_decay, spec_.type == "adamw", steps_};
  for (Param* p : params_)
    k.adam_step(p->value.data(), p->grad.data(), p->state1.data(), p->state2.data(),
                p->value.numel(), ap);
}

float scheduled_lr(float base, const ScheduleSpec& s, int epoch, int epochs) {
  if (s.warmup_epochs > 0 && epoch < s.warmup_epochs)
    return base * static_cast<float>(epoch + 1) / static_cast<float>(s.warmup_epochs + 1);
  const int e = epoch - s.warmup_epochs, span = epochs - s.warmup_epochs;
  if (s.type == "step")
    return base * std::pow(s.gamma, static_cast<float>(e / std::max(1, s.step_epochs)));
  if (s.type == "cosine" && span > 0) {
    const double c = 0.5 * (1.0 + std::cos(3.141592653589793 * e / span));
    return static_cast<float>(s.min_lr + (base - s.min_lr) * c);
  }
  return base;
}

}  // namespace dnnlab::nn
