// Conv2D, MaxPool2D / AvgPool2D and GlobalAvgPool (see conv_layers.hpp).
#include "nn/conv_layers.hpp"

#include <cmath>
#include <limits>

#include "nn/parallel.hpp"
#include "nn/registry.hpp"

namespace dnnlab::nn {
namespace {

// [C, H, W], or [H, W] as one channel.
void chw(const Shape& in, int64_t& c, int64_t& h, int64_t& w) {
  c = in.rank == 3 ? in[0] : 1;
  h = in[in.rank - 2];
  w = in[in.rank - 1];
}

void require(bool ok, const SpecLocation& where, const char* layer, const std::string& message) {
  if (!ok) throw SpecError(where, layer, message);
}

// Output size of one spatial dimension, or a SpecError naming the field.
int64_t out_dim(const char* layer, const char* dim, int64_t in, int kernel, int stride, int pad,
                const SpecLocation& where) {
  const std::string d(dim);
  require(kernel >= 1, where, layer,
          "kernel_" + d + " must be >= 1, got " + std::to_string(kernel));
  require(stride >= 1, where, layer,
          "stride_" + d + " must be >= 1, got " + std::to_string(stride));
  require(pad >= 0, where, layer, "pad_" + d + " must be >= 0, got " + std::to_string(pad));
  require(in + 2 * int64_t(pad) >= kernel, where, layer,
          "kernel_" + d + " " + std::to_string(kernel) + " is larger than the input's " + d + " " +
              std::to_string(in) + " plus padding 2*" + std::to_string(pad));
  return (in + 2 * int64_t(pad) - kernel) / stride + 1;
}

constexpr int64_t kMaxDim = std::numeric_limits<int32_t>::max() / 64;

}  // namespace

// ---- Conv2D -----------------------------------------------------------------

Conv2D::Conv2D(Conv2DConfig config) : Layer("conv2d"), cfg_(std::move(config)) {}

Shape Conv2D::infer(const Shape& in, const SpecLocation& where) const {
  int64_t c, h, w;
  chw(in, c, h, w);
  require(
      cfg_.filters >= 1 && cfg_.filters <= kMaxDim, where, "conv2d",
      "filters must be in 1.." + std::to_string(kMaxDim) + ", got " + std::to_string(cfg_.filters));
  require(cfg_.init.empty() || is_initializer(cfg_.init), where, "conv2d",
          "init must be he, glorot or lecun, got '" + cfg_.init + "'");
  require(c * h * w <= kMaxDim, where, "conv2d", "input " + in.str() + " is too large");
  const int64_t oh = out_dim("conv2d", "h", h, cfg_.kernel_h, cfg_.stride_h, cfg_.pad_h, where);
  const int64_t ow = out_dim("conv2d", "w", w, cfg_.kernel_w, cfg_.stride_w, cfg_.pad_w, where);
  return Shape{cfg_.filters, oh, ow};
}

ConvShape Conv2D::shape_for(int64_t batch) const {
  int64_t c, h, w;
  chw(in_shape(), c, h, w);
  ConvShape s;
  s.n = int(batch);
  s.c = int(c);
  s.h = int(h);
  s.w = int(w);
  s.k = int(cfg_.filters);
  s.kh = cfg_.kernel_h;
  s.kw = cfg_.kernel_w;
  s.sh = cfg_.stride_h;
  s.sw = cfg_.stride_w;
  s.ph = cfg_.pad_h;
  s.pw = cfg_.pad_w;
  return s;
}

void Conv2D::init_params(Rng& rng) {
  const ConvShape s = shape_for(1);
  const int64_t fan_in = s.patch(), fan_out = int64_t(s.k) * s.kh * s.kw;
  weight_.name = "weight";
  weight_.value.resize(Shape{s.k, s.c, s.kh, s.kw});
  weight_.grad.resize(weight_.value.shape());
  float* w = weight_.value.data();
  const int64_t n = weight_.value.numel();
  if (cfg_.init == "glorot") {
    const float limit = std::sqrt(6.f / static_cast<float>(fan_in + fan_out));
    for (int64_t i = 0; i < n; ++i) w[i] = (2.f * rng.uniform() - 1.f) * limit;
  } else {
    const float gain = cfg_.init == "lecun" ? 1.f : 2.f;
    const float sd = std::sqrt(gain / static_cast<float>(fan_in));
    for (int64_t i = 0; i < n; ++i) w[i] = rng.normal() * sd;
  }
  if (cfg_.bias) {
    bias_.name = "bias";
    bias_.value.resize(Shape{s.k});
    bias_.grad.resize(Shape{s.k});
    bias_.value.zero();
  }
}

std::vector<Param*> Conv2D::params() {
  if (cfg_.bias) return {&weight_, &bias_};
  return {&weight_};
}

int64_t Conv2D::param_count() const {
  const ConvShape s = shape_for(1);
  return int64_t(s.k) * s.patch() + (cfg_.bias ? s.k : 0);
}

bool Conv2D::fuse_activation(Act act, float alpha) {
  if (act_ != Act::kIdentity) return false;
  act_ = act;
  alpha_ = alpha;
  return true;
}

std::string Conv2D::describe() const {
  const ConvShape s = shape_for(1);
  std::string d = "conv2d " + std::to_string(s.c) + "->" + std::to_string(s.k) + " " +
                  std::to_string(s.kh) + "x" + std::to_string(s.kw);
  if (s.sh != 1 || s.sw != 1) d += " stride " + std::to_string(s.sh) + "," + std::to_string(s.sw);
  if (s.ph || s.pw) d += " pad " + std::to_string(s.ph) + "," + std::to_string(s.pw);
  d += " " + out_shape().str();
  if (act_ != Act::kIdentity) d += " +" + std::string(act_name(act_));
  return d;
}

void Conv2D::forward(const TensorView& x, const TensorView& y, ForwardContext&) {
  kernels().conv2d_forward(shape_for(x.rows()), x.data(), weight_.value.data(),
                           cfg_.bias ? bias_.value.data() : nullptr, act_, alpha_, y.data());
}

void Conv2D::backward(const TensorView& x, const TensorView& y, const TensorView& dy,
                      const TensorView& dx) {
  const Kernels& kn = kernels();
  const ConvShape s = shape_for(x.rows());
  // Through the fused activation first, in place: dy is this layer's own
  // buffer. Image by image over the threads (elementwise: the same bits);
  // serial, it was the largest serial part of a CNN step on two threads.
  if (act_ != Act::kIdentity) {
    const int64_t per = y.numel() / x.rows();
    parallel_for(int(x.rows()), [&](int n) {
      const int64_t o = n * per;
      kn.act_backward(act_, alpha_, y.data() + o, dy.data() + o, dy.data() + o, size_t(per));
    });
  }
  kn.conv2d_backward_filter(s, x.data(), dy.data(), weight_.grad.data(),
                            cfg_.bias ? bias_.grad.data() : nullptr, accumulate_grads());
  if (dx.data()) kn.conv2d_backward_data(s, weight_.value.data(), dy.data(), dx.data());
}

// ---- Pool2D -----------------------------------------------------------------

Pool2D::Pool2D(Pool kind, Pool2DConfig config)
    : Layer(kind == Pool::kMax ? "max_pool2d" : "avg_pool2d"), kind_(kind), cfg_(config) {
  if (cfg_.stride_h == 0) cfg_.stride_h = cfg_.kernel_h;
  if (cfg_.stride_w == 0) cfg_.stride_w = cfg_.kernel_w;
}

Shape Pool2D::infer(const Shape& in, const SpecLocation& where) const {
  int64_t c, h, w;
  chw(in, c, h, w);
  require(c * h * w <= kMaxDim, where, type(), "input " + in.str() + " is too large");
  const int64_t oh = out_dim(type(), "h", h, cfg_.kernel_h, cfg_.stride_h, cfg_.pad_h, where);
  const int64_t ow = out_dim(type(), "w", w, cfg_.kernel_w, cfg_.stride_w, cfg_.pad_w, where);
  require(2 * cfg_.pad_h <= cfg_.kernel_h, where, type(),
          "pad_h " + std::to_string(cfg_.pad_h) + " is more than half of kernel_h " +
              std::to_string(cfg_.kernel_h));
  require(2 * cfg_.pad_w <= cfg_.kernel_w, where, type(),
          "pad_w " + std::to_string(cfg_.pad_w) + " is more than half of kernel_w " +
              std::to_string(cfg_.kernel_w));
  return Shape{c, oh, ow};
}

PoolShape Pool2D::shape_for(int64_t batch) const {
  int64_t c, h, w;
  chw(in_shape(), c, h, w);
  return PoolShape{int(batch),    int(c),        int(h),        int(w),     cfg_.kernel_h,
                   cfg_.kernel_w, cfg_.stride_h, cfg_.stride_w, cfg_.pad_h, cfg_.pad_w};
}

std::string Pool2D::describe() const {
  return std::string(type()) + " " + std::to_string(cfg_.kernel_h) + "x" +
         std::to_string(cfg_.kernel_w) + " " + out_shape().str();
}

void Pool2D::forward(const TensorView& x, const TensorView& y, ForwardContext&) {
  if (kind_ == Pool::kMax) argmax_.resize(size_t(y.numel()));
  kernels().pool2d_forward(kind_, shape_for(x.rows()), x.data(), y.data(),
                           kind_ == Pool::kMax ? argmax_.data() : nullptr);
}

void Pool2D::backward(const TensorView& x, const TensorView&, const TensorView& dy,
                      const TensorView& dx) {
  if (!dx.data()) return;
  kernels().pool2d_backward(kind_, shape_for(x.rows()), dy.data(),
                            kind_ == Pool::kMax ? argmax_.data() : nullptr, dx.data());
}

// ---- GlobalAvgPool ----------------------------------------------------------

Shape GlobalAvgPool::infer(const Shape& in, const SpecLocation& where) const {
  require(in.numel() <= kMaxDim, where, type(), "input " + in.str() + " is too large");
  return Shape{in[0]};
}

PoolShape GlobalAvgPool::shape_for(int64_t batch) const {
  const Shape& in = in_shape();
  const int c = int(in[0]), h = int(in[1]), w = int(in[2]);
  return PoolShape{int(batch), c, h, w, h, w, 1, 1, 0, 0};
}

void GlobalAvgPool::forward(const TensorView& x, const TensorView& y, ForwardContext&) {
  kernels().pool2d_forward(Pool::kAvg, shape_for(x.rows()), x.data(), y.data(), nullptr);
}

void GlobalAvgPool::backward(const TensorView& x, const TensorView&, const TensorView& dy,
                             const TensorView& dx) {
  if (!dx.data()) return;
  kernels().pool2d_backward(Pool::kAvg, shape_for(x.rows()), dy.data(), nullptr, dx.data());
}

}  // namespace dnnlab::nn
