#include "hybrid/aggregate.hpp"

#include <stdexcept>

namespace dnnlab::hybrid {

MixWeights mix_weights(std::span<const GradientShare> shares) {
  MixWeights w;
  double rows = 0, sum = 0;
  std::vector<double> raw;
  for (const GradientShare& s : shares) {
    rows += static_cast<double>(s.rows);
    raw.push_back(static_cast<double>(s.rows) / (1.0 + static_cast<double>(s.age)));
    sum += raw.back();
  }
  for (double r : raw) {
    w.grad.push_back(static_cast<float>(r / rows));
    w.state.push_back(static_cast<float>(r / sum));
  }
  return w;
}

void weighted_sum(nn::Tensor& dst, std::span<const nn::Tensor* const> parts,
                  std::span<const float> weights) {
  if (parts.size() != weights.size()) throw std::logic_error("weighted_sum: a weight per part");
  float* d = dst.data();
  const int64_t n = dst.numel();
  for (size_t j = 0; j < parts.size(); ++j) {
    if (parts[j]->numel() != n) throw std::logic_error("weighted_sum: parts of another size");
    const float* s = parts[j]->data();
    const float k = weights[j];
    if (j == 0)
      for (int64_t i = 0; i < n; ++i) d[i] = s[i] * k;
    else
      for (int64_t i = 0; i < n; ++i) d[i] += s[i] * k;
  }
}

}  // namespace dnnlab::hybrid
