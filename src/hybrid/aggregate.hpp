// How the server combines the weight gradients of one features step: the
// staleness rule as one pure function (docs/distributed.md, "Bounded
// staleness"), and the weighted sum it drives.
//
//   std::vector<GradientShare> shares = {{64, 0}, {64, 1}};   // rows, age
//   MixWeights w = mix_weights(shares);    // grad: {2/3, 1/3} of the mean; state sums to 1
//   weighted_sum(param.grad, {&g0, &g1}, w.grad);
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "nn/tensor.hpp"

namespace dnnlab::hybrid {

struct GradientShare {
  int64_t rows = 0;  // the batch it was computed on
  uint64_t age = 0;  // versions between the one it was computed on and now
};

struct MixWeights {
  // Gradient i counts rows_i / (1 + age_i) / sum_j rows_j: by batch size,
  // and a stale one makes the step smaller rather than steering it.
  std::vector<float> grad;
  // The same weights normalised to sum to 1, for BatchNorm running
  // statistics (a mean, not a step).
  std::vector<float> state;
};

MixWeights mix_weights(std::span<const GradientShare> shares);

// dst = sum_i weights[i] * parts[i], every part of dst's size. With one part
// and weight 1 dst is a bitwise copy (one client at s = 0 is standalone).
void weighted_sum(nn::Tensor& dst, std::span<const nn::Tensor* const> parts,
                  std::span<const float> weights);

}  // namespace dnnlab::hybrid
