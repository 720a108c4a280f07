// Error feedback (feedback.hpp).
#include "hybrid/feedback.hpp"

#include <algorithm>
#include <span>
#include <vector>

namespace dnnlab::hybrid {

void ErrorFeedback::carry(nn::Tensor& t, Dtype dtype) {
  const int64_t n = t.numel();
  const int64_t both = std::min(n, residual_.numel());
  float* x = t.data();
  for (int64_t i = 0; i < both; ++i) x[i] += residual_.data()[i];
  std::vector<float> read(x, x + n);
  if (!wire_round(std::span<float>(read), dtype)) {
    clear();
    return;
  }
  residual_ = nn::Tensor(t.shape());
  for (int64_t i = 0; i < n; ++i) residual_.data()[i] = x[i] - read[static_cast<size_t>(i)];
}

}  // namespace dnnlab::hybrid
