// Losses over a batch of logits with integer class labels. Each returns the
// mean loss, writes dLoss/dlogits (mean-reduced) when `grad` has data, and
// counts correct arg-max predictions when `correct` is not null.
#pragma once
#include <cstdint>
#include <string_view>

#include "nn/tensor.hpp"

namespace dnnlab::nn {

enum class LossKind : uint8_t { kSoftmaxCrossEntropy, kMse };
bool loss_from_name(std::string_view name, LossKind* kind);

struct LossAndAccuracy {
  double loss = 0, accuracy = 0;
};

// Softmax and cross-entropy fused: numerically stable, grad = softmax - onehot.
float softmax_cross_entropy(const TensorView& logits, const int32_t* labels, const TensorView& grad,
                            int64_t* correct);
// Mean squared error against one-hot targets, averaged over batch and classes.
float mse_onehot(const TensorView& logits, const int32_t* labels, const TensorView& grad,
                 int64_t* correct);
float compute_loss(LossKind kind, const TensorView& logits, const int32_t* labels,
                   const TensorView& grad, int64_t* correct);

}  // namespace dnnlab::nn
