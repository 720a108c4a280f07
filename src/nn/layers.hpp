// The built-in layers. Each is listed in registry.cpp's table.
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

}  // namespace dnnlab::nn
