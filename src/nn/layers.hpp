// The built-in layers. Each is listed in registry.cpp's table, which also
// describes their attributes.
#pragma once
#include <vector>

#include "nn/layer.hpp"
#include "nn/sparse.hpp"

namespace dnnlab::nn {

// y = x W + b, W stored [in, out]; flattens a multi-dimensional input. A
// following activation is fused into the matrix multiply's epilogue. An
// operand that is mostly zeros (x after a ReLU or from a sparse image, dy
// after a ReLU's mask) goes through spmm, which skips them.
class Dense final : public Layer {
 public:
  Dense(int64_t units, std::string init, bool bias);
  void forward(const TensorView& x, const TensorView& y, ForwardContext& ctx) override;
  void backward(const TensorView& x, const TensorView& y, const TensorView& dy,
                const TensorView& dx) override;
  std::vector<Param*> params() override;
  int64_t param_count() const override {
    return (in_shape().numel() + (has_bias_ ? 1 : 0)) * units_;
  }
  bool fuse_activation(Act act, float alpha) override;
  std::string describe() const override;
  const std::string& init() const { return init_; }
  void set_default_init(const std::string& init) {
    if (init_.empty()) init_ = init;
  }

 protected:
  Shape infer(const Shape& in, const SpecLocation& where) const override;
  void init_params(Rng& rng) override;

 private:
  int64_t units_;
  std::string init_;
  bool has_bias_;
  Act act_ = Act::kIdentity;
  float alpha_ = 0.f;
  Param weight_, bias_;
  bool x_sparse_ = false;       // the last forward's x went through spmm
  SparseBuffer sparse_;         // x or dy without its zeros
  std::vector<float> scratch_;  // W^T or dW^T for the sparse paths
};

// Elementwise activation; backward uses only the output.
class Activation final : public Layer {
 public:
  Activation(const char* type, Act act, float alpha) : Layer(type), act_(act), alpha_(alpha) {}
  void forward(const TensorView& x, const TensorView& y, ForwardContext& ctx) override;
  void backward(const TensorView& x, const TensorView& y, const TensorView& dy,
                const TensorView& dx) override;
  bool in_place() const override { return true; }
  Act act() const { return act_; }
  float alpha() const { return alpha_; }

 protected:
  ShapeContract contract() const override { return {1, 3}; }

 private:
  Act act_;
  float alpha_;
};

// Softmax over the last dimension.
class Softmax final : public Layer {
 public:
  Softmax() : Layer("softmax") {}
  void forward(const TensorView& x, const TensorView& y, ForwardContext& ctx) override;
  void backward(const TensorView& x, const TensorView& y, const TensorView& dy,
                const TensorView& dx) override;

 protected:
  ShapeContract contract() const override { return {1, 1}; }
};

// Inverted dropout: scales kept units by 1/(1-rate) while training; identity
// at evaluation.
class Dropout final : public Layer {
 public:
  explicit Dropout(float rate) : Layer("dropout"), rate_(rate) {}
  void forward(const TensorView& x, const TensorView& y, ForwardContext& ctx) override;
  void backward(const TensorView& x, const TensorView& y, const TensorView& dy,
                const TensorView& dx) override;
  bool in_place() const override { return true; }

 private:
  float rate_;
  Tensor mask_;
  bool mask_valid_ = false;
};

// [C, H, W] (or any shape) -> [C*H*W]; the bytes do not move.
class Flatten final : public Layer {
 public:
  Flatten() : Layer("flatten") {}
  void forward(const TensorView& x, const TensorView& y, ForwardContext& ctx) override;
  void backward(const TensorView& x, const TensorView& y, const TensorView& dy,
                const TensorView& dx) override;

 protected:
  Shape infer(const Shape& in, const SpecLocation&) const override { return Shape{in.numel()}; }
};

// Batch normalization over each feature of a [F] input or each channel of a
// [C, ...] input (statistics over the batch and the positions). Training
// uses the batch's mean and (biased) variance and moves the running
// statistics by `momentum` (running_var takes the unbiased variance, as
// PyTorch does); evaluation uses the running statistics. Learned scale
// (weight, 1) and shift (bias, 0) per channel.
class BatchNorm final : public Layer {
 public:
  BatchNorm(float momentum, float eps) : Layer("batchnorm"), momentum_(momentum), eps_(eps) {}
  void forward(const TensorView& x, const TensorView& y, ForwardContext& ctx) override;
  void backward(const TensorView& x, const TensorView& y, const TensorView& dy,
                const TensorView& dx) override;
  std::vector<Param*> params() override { return {&gamma_, &beta_}; }
  std::vector<Param*> state() override { return {&running_mean_, &running_var_}; }
  int64_t param_count() const override { return 2 * channels(); }
  std::string describe() const override;

 protected:
  void init_params(Rng& rng) override;

 private:
  int64_t channels() const { return in_shape()[0]; }
  int64_t positions() const { return in_shape().numel() / in_shape()[0]; }
  float momentum_, eps_;
  Param gamma_, beta_, running_mean_, running_var_;
  std::vector<float> mean_, invstd_;  // of the last forward, per channel
  bool batch_stats_ = false;          // the last forward normalized with batch statistics
};

// y = x0 + x1 + ...; every input has the same shape.
class Add final : public MultiInputLayer {
 public:
  Add() : MultiInputLayer("add") {}
  void forward_n(std::span<const TensorView> xs, const TensorView& y, ForwardContext& ctx) override;
  void backward_n(std::span<const TensorView> xs, const TensorView& y, const TensorView& dy,
                  std::span<const TensorView> dxs) override;

 protected:
  Shape infer_n(std::span<const Shape> in, const SpecLocation& where) const override;
};

// Joins the inputs along the first sample dimension: features of [F]
// inputs, channels of [C, H, W] inputs; the other dimensions must agree.
class Concat final : public MultiInputLayer {
 public:
  Concat() : MultiInputLayer("concat") {}
  void forward_n(std::span<const TensorView> xs, const TensorView& y, ForwardContext& ctx) override;
  void backward_n(std::span<const TensorView> xs, const TensorView& y, const TensorView& dy,
                  std::span<const TensorView> dxs) override;

 protected:
  Shape infer_n(std::span<const Shape> in, const SpecLocation& where) const override;
};

}  // namespace dnnlab::nn
