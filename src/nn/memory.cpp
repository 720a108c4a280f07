// Memory of training a model from its shapes (see memory.hpp).
#include "nn/memory.hpp"

#include <algorithm>
#include <cstdio>
#include <limits>

namespace dnnlab::nn {
namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

// a * b and a + b clamped to [0, kMax]: the inputs are non-negative.
int64_t mul(int64_t a, int64_t b) {
  if (a == 0 || b == 0) return 0;
  return a > kMax / b ? kMax : a * b;
}
int64_t add(int64_t a, int64_t b) {
  return a > kMax - b ? kMax : a + b;
}

int optimizer_buffers(const OptimizerSpec& o) {
  if (o.type == "adam" || o.type == "adamw") return 2;
  if (o.type == "rmsprop") return 1 + (o.momentum > 0) + (o.centered ? 1 : 0);
  return 1;  // sgd's velocity (allocated with or without momentum), adagrad's sums
}

}  // namespace

MemoryEstimate estimate_memory(std::span<const NodeFootprint> nodes, int64_t input_per_sample,
                               int64_t batch, const OptimizerSpec& optimizer) {
  constexpr int64_t kFloat = 4;
  const int64_t rows = std::max(batch, kEvalBatch);
  int64_t params = 0, state = 0, per_sample = input_per_sample, fixed = 0;
  for (const NodeFootprint& n : nodes) {
    params = add(params, n.params);
    state = add(state, n.state);
    // The output and its gradient, sized once for the largest batch.
    per_sample = add(per_sample, add(mul(2, n.out_per_sample), n.scratch_per_sample));
    fixed = add(fixed, n.scratch_fixed);
  }
  MemoryEstimate m;
  m.weights = mul(kFloat, add(params, state));
  m.gradients = mul(kFloat, params);
  m.optimizer = mul(kFloat, mul(optimizer_buffers(optimizer), params));
  m.activations = mul(kFloat, add(mul(rows, per_sample), fixed));
  return m;
}

int64_t MemoryEstimate::total() const {
  return add(add(weights, gradients), add(optimizer, activations));
}

std::string MemoryEstimate::describe(int64_t batch) const {
  return "weights " + format_bytes(weights) + " + gradients " + format_bytes(gradients) +
         " + optimizer state " + format_bytes(optimizer) + " + activations " +
         format_bytes(activations) + " (batch " + std::to_string(batch) +
         (batch < kEvalBatch ? ", evaluated in batches of " + std::to_string(kEvalBatch) : "") +
         ") = " + format_bytes(total());
}

std::string format_bytes(int64_t bytes) {
  if (bytes < 1024) return std::to_string(bytes) + " B";
  static const char* const kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = static_cast<double>(bytes);
  int u = -1;
  while (v >= 1024 && u < 5) v /= 1024, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f %s", v, kUnits[u]);
  return buf;
}

}  // namespace dnnlab::nn
