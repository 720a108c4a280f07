// Convolutional layers over NCHW activations: Conv2D, MaxPool2D / AvgPool2D
// and GlobalAvgPool, each built from a plain config struct and running on
// the kernel table's conv and pool kernels (im2col + sgemm per image; see
// kernels/README.md, "Convolution"). A per-sample input is [C, H, W], or
// [H, W] taken as one channel.
//
//   Conv2DConfig c;  // 32 filters of 3x3, padding 1: [1,28,28] -> [32,28,28]
//   c.filters = 32;
//   c.kernel_h = c.kernel_w = 3;
//   c.pad_h = c.pad_w = 1;
//   Conv2D conv(c);
//   conv.bind(Shape{1, 28, 28}, &rng, where);
//   Pool2DConfig p;  // 2x2, stride 2 (the kernel size when 0)
//   p.kernel_h = p.kernel_w = 2;
//   Pool2D pool(Pool::kMax, p);
//   pool.bind(conv.out_shape(), &rng, where);  // [32,14,14]
//
// In specs as conv2d, max_pool2d, avg_pool2d and global_avg_pool
// (registry.cpp: square kernel, stride and padding).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "nn/layer.hpp"

namespace dnnlab::nn {

struct Conv2DConfig {
  int64_t filters = 0;  // output channels, >= 1
  int kernel_h = 3, kernel_w = 3;
  int stride_h = 1, stride_w = 1;
  int pad_h = 0, pad_w = 0;  // zeros on each side
  bool bias = true;
  std::string init = "he";  // he, glorot or lecun, by fan-in C * kernel_h * kernel_w; "": he
};

// y = act(conv(x, W) + b), W stored [filters, C, kernel_h, kernel_w]. A
// following activation is fused (applied while each image's output is in
// cache), as in Dense.
class Conv2D final : public Layer {
 public:
  explicit Conv2D(Conv2DConfig config);
  void forward(const TensorView& x, const TensorView& y, ForwardContext& ctx) override;
  void backward(const TensorView& x, const TensorView& y, const TensorView& dy,
                const TensorView& dx) override;
  std::vector<Param*> params() override;
  int64_t param_count() const override;
  bool fuse_activation(Act act, float alpha) override;
  std::string describe() const override;
  const Conv2DConfig& config() const { return cfg_; }
  // The model's `init` for a layer whose own is "" (as Dense).
  void set_default_init(const std::string& init) {
    if (cfg_.init.empty()) cfg_.init = init;
  }

 protected:
  ShapeContract contract() const override { return {2, 3}; }
  Shape infer(const Shape& in, const SpecLocation& where) const override;
  void init_params(Rng& rng) override;

 private:
  ConvShape shape_for(int64_t batch) const;

  Conv2DConfig cfg_;
  Act act_ = Act::kIdentity;
  float alpha_ = 0.f;
  Param weight_, bias_;
};

struct Pool2DConfig {
  int kernel_h = 2, kernel_w = 2;
  int stride_h = 0, stride_w = 0;  // 0: the kernel size (non-overlapping windows)
  int pad_h = 0, pad_w = 0;        // at most half the kernel, so no window is all padding
};

// Max or average pooling over each channel's plane. An average counts the
// padding in its divisor (PyTorch's default). Max pooling keeps the winning
// input of every output from its last forward for backward.
class Pool2D final : public Layer {
 public:
  Pool2D(Pool kind, Pool2DConfig config);
  void forward(const TensorView& x, const TensorView& y, ForwardContext& ctx) override;
  void backward(const TensorView& x, const TensorView& y, const TensorView& dy,
                const TensorView& dx) override;
  std::string describe() const override;

 protected:
  ShapeContract contract() const override { return {2, 3}; }
  Shape infer(const Shape& in, const SpecLocation& where) const override;

 private:
  PoolShape shape_for(int64_t batch) const;

  Pool kind_;
  Pool2DConfig cfg_;
  std::vector<int32_t> argmax_;
};

// The mean of each channel's plane: [C, H, W] -> [C].
class GlobalAvgPool final : public Layer {
 public:
  GlobalAvgPool() : Layer("global_avg_pool") {}
  void forward(const TensorView& x, const TensorView& y, ForwardContext& ctx) override;
  void backward(const TensorView& x, const TensorView& y, const TensorView& dy,
                const TensorView& dx) override;

 protected:
  ShapeContract contract() const override { return {3, 3}; }
  Shape infer(const Shape& in, const SpecLocation& where) const override;

 private:
  PoolShape shape_for(int64_t batch) const;
};

}  // namespace dnnlab::nn
