// Error feedback for one sender's stream of batch tensors of one kind (a
// client's activations, or the server's activation gradients for one
// client): what quantising a tensor lost is added to the next tensor of the
// stream before it is quantised (docs/distributed.md "Bytes" says where it
// is sound, and what it measured).
//
//   hybrid::ErrorFeedback fb;                 // one per sender and kind
//   fb.carry(frame.tensors[0], Dtype::kInt8); // before encode(frame)
#pragma once
#include "hybrid/wire.hpp"
#include "nn/tensor.hpp"

namespace dnnlab::hybrid {

class ErrorFeedback {
 public:
  // Adds the carried error to `t` value for value over the values both
  // have (batches of one stream have the same row shape, so that is row
  // for row; a shorter last batch takes the first rows), then carries what
  // the receiver will not read of the result: t - wire_round(t). `t` keeps
  // the values to encode. A non-finite value (the frame then travels in
  // float32, nothing is lost) carries nothing.
  void carry(nn::Tensor& t, Dtype dtype);
  const nn::Tensor& residual() const { return residual_; }
  void clear() { residual_ = nn::Tensor(); }

 private:
  nn::Tensor residual_;
};

}  // namespace dnnlab::hybrid
