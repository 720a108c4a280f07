// Optimizers and learning-rate schedules.
#include "nn/optim.hpp"

#include <algorithm>
#include <cmath>

#include "nn/registry.hpp"

namespace dnnlab::nn {

Optimizer::Optimizer(const OptimizerSpec& spec, std::vector<Param*> params)
    : spec_(spec), params_(std::move(params)), lr_(spec.lr) {
  // The registry's types (optimizer_section()) are the ones stepped below.
  if (!is_listed(optimizer_section().names, spec_.type))
    throw SpecError({}, "optimizer.type", "unknown optimizer '" + spec_.type + "'");
  const bool adam = spec_.type == "adam" || spec_.type == "adamw";
  const bool rms = spec_.type == "rmsprop";
  auto zeroed = [](Tensor& t, const Shape& s) {
    t.resize(s);
    t.zero();
  };
  for (Param* p : params_) {
    const Shape& s = p->value.shape();
    zeroed(p->state1, s);
    // AdaGrad's sum of squares starts at initial_accumulator_value.
    if (spec_.type == "adagrad") p->state1.view().fill(spec_.initial_accumulator);
    if (adam || (rms && spec_.momentum > 0)) zeroed(p->state2, s);
    if (rms && spec_.centered) zeroed(p->state3, s);
  }
}

namespace {

// torch.optim.Adagrad: g += wd w; sum += g^2; w -= clr g / (sqrt(sum) + eps),
// clr = lr / (1 + (t - 1) lr_decay). eps outside the square root.
void adagrad_step(Param& p, const OptimizerSpec& s, float lr, int64_t t) {
  const float clr = lr / (1.f + static_cast<float>(t - 1) * s.lr_decay);
  float* w = p.value.data();
  const float* g = p.grad.data();
  float* sum = p.state1.data();
  for (int64_t i = 0, n = p.value.numel(); i < n; ++i) {
    const float gi = g[i] + s.weight_decay * w[i];
    sum[i] += gi * gi;
    w[i] -= clr * gi / (std::sqrt(sum[i]) + s.eps);
  }
}

// torch.optim.RMSprop: g += wd w; sq = alpha sq + (1 - alpha) g^2; centered:
// ga = alpha ga + (1 - alpha) g and the denominator is sqrt(sq - ga^2) + eps,
// else sqrt(sq) + eps; momentum: buf = m buf + g / den, w -= lr buf; else
// w -= lr g / den.
void rmsprop_step(Param& p, const OptimizerSpec& s, float lr) {
  float* w = p.value.data();
  const float* g = p.grad.data();
  float* sq = p.state1.data();
  float* buf = s.momentum > 0 ? p.state2.data() : nullptr;
  float* ga = s.centered ? p.state3.data() : nullptr;
  const float a = s.alpha;
  for (int64_t i = 0, n = p.value.numel(); i < n; ++i) {
    const float gi = g[i] + s.weight_decay * w[i];
    sq[i] = a * sq[i] + (1.f - a) * gi * gi;
    float var = sq[i];
    if (ga) {
      ga[i] = a * ga[i] + (1.f - a) * gi;
      var -= ga[i] * ga[i];
    }
    const float step = gi / (std::sqrt(var) + s.eps);
    if (buf) {
      buf[i] = s.momentum * buf[i] + step;
      w[i] -= lr * buf[i];
    } else {
      w[i] -= lr * step;
    }
  }
}

}  // namespace

void Optimizer::step() {
  ++steps_;
  const Kernels& k = kernels();
  if (spec_.type == "sgd") {
    SgdParams sp{lr_, spec_.momentum, spec_.weight_decay, spec_.nesterov};
    for (Param* p : params_)
      k.sgd_step(p->value.data(), p->grad.data(), p->state1.data(), p->value.numel(), sp);
    return;
  }
  if (spec_.type == "adagrad") {
    for (Param* p : params_) adagrad_step(*p, spec_, lr_, steps_);
    return;
  }
  if (spec_.type == "rmsprop") {
    for (Param* p : params_) rmsprop_step(*p, spec_, lr_);
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
