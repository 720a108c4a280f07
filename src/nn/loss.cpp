// Losses: fused softmax cross-entropy and one-hot MSE.
#include "nn/loss.hpp"

#include <cmath>

#include "nn/registry.hpp"

namespace dnnlab::nn {

static_assert(static_cast<int>(LossKind::kMse) == 1,
              "loss_registry() lists the losses in LossKind's order");

// The registry's names only: a name no codec reads is no loss.
bool loss_from_name(std::string_view name, LossKind* kind) {
  const std::span<const std::string_view> names = loss_names();
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i] == name) {
      *kind = static_cast<LossKind>(i);
      return true;
    }
  return false;
}

namespace {
int64_t argmax(const float* v, int64_t n) {
  int64_t best = 0;
  for (int64_t j = 1; j < n; ++j)
    if (v[j] > v[best]) best = j;
  return best;
}
}  // namespace

float softmax_cross_entropy(const TensorView& logits, const int32_t* labels, const TensorView& grad,
                            int64_t* correct) {
  const int64_t rows = logits.rows(), cols = logits.cols();
  const float inv_rows = 1.f / static_cast<float>(rows);
  double total = 0;
  int64_t hits = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const float* z = logits.data() + r * cols;
    const int64_t am = argmax(z, cols);
    const float mx = z[am];
    hits += am == labels[r];
    float sum = 0.f;
    for (int64_t j = 0; j < cols; ++j) sum += std::exp(z[j] - mx);
    const float log_sum = std::log(sum);
    total += static_cast<double>(log_sum - (z[labels[r]] - mx));
    if (grad.data()) {
      float* g = grad.data() + r * cols;
      const float inv = inv_rows / sum;
      for (int64_t j = 0; j < cols; ++j) g[j] = std::exp(z[j] - mx) * inv;
      g[labels[r]] -= inv_rows;
    }
  }
  if (correct) *correct += hits;
  return static_cast<float>(total / static_cast<double>(rows));
}

float mse_onehot(const TensorView& out, const int32_t* labels, const TensorView& grad,
                 int64_t* correct) {
  const int64_t rows = out.rows(), cols = out.cols();
  const float scale = 2.f / static_cast<float>(rows * cols);
  double total = 0;
  int64_t hits = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const float* z = out.data() + r * cols;
    hits += argmax(z, cols) == labels[r];
    for (int64_t j = 0; j < cols; ++j) {
      const float d = z[j] - (j == labels[r] ? 1.f : 0.f);
      total += static_cast<double>(d) * d;
      if (grad.data()) grad.data()[r * cols + j] = scale * d;
    }
  }
  if (correct) *correct += hits;
  return static_cast<float>(total / static_cast<double>(rows * cols));
}

float compute_loss(LossKind kind, const TensorView& logits, const int32_t* labels,
                   const TensorView& grad, int64_t* correct) {
  return kind == LossKind::kMse ? mse_onehot(logits, labels, grad, correct)
                                : softmax_cross_entropy(logits, labels, grad, correct);
}

}  // namespace dnnlab::nn
