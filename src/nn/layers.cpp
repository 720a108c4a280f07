// Built-in layers: Dense (with fused activation), activations, Softmax, Dropout.
#include "nn/layers.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace dnnlab::nn {

void Layer::bind(const Shape& in, Rng* rng, const SpecLocation& where) {
  const ShapeContract c = contract();
  const int rank = in.rank;
  if (rank < c.min_rank || rank > c.max_rank)
    throw SpecError(where, type_,
                    "takes inputs of " + std::to_string(c.min_rank) + ".." +
                        std::to_string(c.max_rank) + " dimensions per sample, got " + in.str());
  for (int i = 0; i < rank; ++i)
    if (in[i] <= 0)
      throw SpecError(where, type_, "input shape " + in.str() + " has an empty dimension");
  in_ = in;
  out_ = infer(in, where);
  if (rng) init_params(*rng);
}

std::string Layer::describe() const {
  return std::string(type_) + " " + out_.str();
}

// ---- Dense ----------------------------------------------------------------

Dense::Dense(int64_t units, std::string init, bool bias)
    : Layer("dense"), units_(units), init_(std::move(init)), has_bias_(bias) {}

Shape Dense::infer(const Shape& in, const SpecLocation& where) const {
  if (units_ < 1)
    throw SpecError(where, "dense", "needs at least 1 unit, got " + std::to_string(units_));
  return Shape{units_};
}

void Dense::init_params(Rng& rng) {
  const int64_t fan_in = in_shape().numel(), fan_out = units_;
  weight_.name = "weight";
  weight_.value.resize(Shape{fan_in, fan_out});
  weight_.grad.resize(Shape{fan_in, fan_out});
  float* w = weight_.value.data();
  const int64_t n = fan_in * fan_out;
  if (init_ == "glorot") {
    const float limit = std::sqrt(6.f / static_cast<float>(fan_in + fan_out));
    for (int64_t i = 0; i < n; ++i) w[i] = (2.f * rng.uniform() - 1.f) * limit;
  } else {
    // he (default) and lecun: normal with std sqrt(gain / fan_in).
    const float gain = init_ == "lecun" ? 1.f : 2.f;
    const float sd = std::sqrt(gain / static_cast<float>(fan_in));
    for (int64_t i = 0; i < n; ++i) w[i] = rng.normal() * sd;
  }
  if (has_bias_) {
    bias_.name = "bias";
    bias_.value.resize(Shape{fan_out});
    bias_.grad.resize(Shape{fan_out});
    bias_.value.zero();
  }
}

std::vector<Param*> Dense::params() {
  if (has_bias_) return {&weight_, &bias_};
  return {&weight_};
}

bool Dense::fuse_activation(Act act, float alpha) {
  if (act_ != Act::kIdentity) return false;
  act_ = act;
  alpha_ = alpha;
  return true;
}

std::string Dense::describe() const {
  std::string s = "dense " + std::to_string(in_shape().numel()) + "->" + std::to_string(units_);
  if (act_ != Act::kIdentity) s += " +" + std::string(act_name(act_));
  return s;
}

void Dense::forward(const TensorView& x, const TensorView& y, ForwardContext&) {
  const int m = static_cast<int>(x.rows()), k = static_cast<int>(x.cols()),
            n = static_cast<int>(units_);
  Epilogue ep{has_bias_ ? bias_.value.data() : nullptr, act_, alpha_};
  const Kernels& kn = kernels();
  x_sparse_ = use_spmm(kn, x.data(), m, k, k, n);
  if (x_sparse_) {
    kn.spmm(sparse_.from_rows(kn, x.data(), m, k, k), n, weight_.value.data(), n, 0.f, y.data(), n,
            &ep);
    return;
  }
  kn.sgemm(Trans::kNo, Trans::kNo, m, n, k, 1.f, x.data(), k, weight_.value.data(), n, 0.f,
           y.data(), n, &ep);
}

void Dense::backward(const TensorView& x, const TensorView& y, const TensorView& dy,
                     const TensorView& dx) {
  const Kernels& kn = kernels();
  const int m = static_cast<int>(x.rows()), k = static_cast<int>(x.cols()),
            n = static_cast<int>(units_);
  // Through the fused activation first, in place: dy is this layer's own buffer.
  if (act_ != Act::kIdentity)
    kn.act_backward(act_, alpha_, y.data(), dy.data(), dy.data(), y.numel());
  // dW = x^T dy, db = column sums of dy, dx = dy W^T. Either factor of dW
  // can be the sparse one: x (after a ReLU, or a sparse image) directly, or
  // dy (masked by this layer's ReLU) as dW^T = dy^T x, transposed back.
  float* dw = weight_.grad.data();
  // dy's density matters unless x already serves dW and there is no dx.
  const bool dy_sparse = (!x_sparse_ || dx.data()) && use_spmm(kn, dy.data(), m, n, n, k);
  if (x_sparse_) {  // x is the forward's x: its density was counted there
    kn.spmm(sparse_.from_cols(kn, x.data(), m, k, k), n, dy.data(), n, 0.f, dw, n, nullptr);
  } else if (dy_sparse) {
    scratch_.resize(size_t(n) * k);
    kn.spmm(sparse_.from_cols(kn, dy.data(), m, n, n), k, x.data(), k, 0.f, scratch_.data(), k,
            nullptr);
    kn.transpose(scratch_.data(), n, k, k, dw, n);
  } else {
    kn.sgemm(Trans::kYes, Trans::kNo, k, n, m, 1.f, x.data(), k, dy.data(), n, 0.f, dw, n, nullptr);
  }
  if (has_bias_) kn.col_sum(dy.data(), m, n, n, bias_.grad.data(), false);
  if (!dx.data()) return;
  if (dy_sparse) {
    scratch_.resize(size_t(n) * k);
    kn.transpose(weight_.value.data(), k, n, n, scratch_.data(), k);
    kn.spmm(sparse_.from_rows(kn, dy.data(), m, n, n), k, scratch_.data(), k, 0.f, dx.data(), k,
            nullptr);
    return;
  }
  kn.sgemm(Trans::kNo, Trans::kYes, m, k, n, 1.f, dy.data(), n, weight_.value.data(), n, 0.f,
           dx.data(), k, nullptr);
}

// ---- Activation -----------------------------------------------------------

void Activation::forward(const TensorView& x, const TensorView& y, ForwardContext&) {
  kernels().act_forward(act_, alpha_, x.data(), y.data(), x.numel());
}

void Activation::backward(const TensorView&, const TensorView& y, const TensorView& dy,
                          const TensorView& dx) {
  if (dx.data()) kernels().act_backward(act_, alpha_, y.data(), dy.data(), dx.data(), y.numel());
}

// ---- Softmax --------------------------------------------------------------

void Softmax::forward(const TensorView& x, const TensorView& y, ForwardContext&) {
  const int64_t rows = x.rows(), cols = x.cols();
  for (int64_t r = 0; r < rows; ++r) {
    const float* xi = x.data() + r * cols;
    float* yi = y.data() + r * cols;
    float mx = *std::max_element(xi, xi + cols);
    float sum = 0.f;
    for (int64_t j = 0; j < cols; ++j) sum += (yi[j] = std::exp(xi[j] - mx));
    const float inv = 1.f / sum;
    for (int64_t j = 0; j < cols; ++j) yi[j] *= inv;
  }
}

void Softmax::backward(const TensorView&, const TensorView& y, const TensorView& dy,
                       const TensorView& dx) {
  if (!dx.data()) return;
  const int64_t rows = y.rows(), cols = y.cols();
  for (int64_t r = 0; r < rows; ++r) {
    const float* yi = y.data() + r * cols;
    const float* gi = dy.data() + r * cols;
    float* di = dx.data() + r * cols;
    float dot = 0.f;
    for (int64_t j = 0; j < cols; ++j) dot += yi[j] * gi[j];
    for (int64_t j = 0; j < cols; ++j) di[j] = yi[j] * (gi[j] - dot);
  }
}

// ---- Dropout --------------------------------------------------------------

void Dropout::forward(const TensorView& x, const TensorView& y, ForwardContext& ctx) {
  const int64_t n = x.numel();
  mask_valid_ = ctx.training && rate_ > 0.f && ctx.rng;
  if (!mask_valid_) {
    if (y.data() != x.data()) std::memcpy(y.data(), x.data(), sizeof(float) * n);
    return;
  }
  mask_.resize(x.shape());
  const float keep = 1.f - rate_, scale = 1.f / keep;
  float* m = mask_.data();
  for (int64_t i = 0; i < n; ++i) {
    m[i] = ctx.rng->uniform() < keep ? scale : 0.f;
    y.data()[i] = x.data()[i] * m[i];
  }
}

void Dropout::backward(const TensorView&, const TensorView&, const TensorView& dy,
                       const TensorView& dx) {
  if (!dx.data()) return;
  const int64_t n = dy.numel();
  if (!mask_valid_) {
    if (dx.data() != dy.data()) std::memcpy(dx.data(), dy.data(), sizeof(float) * n);
    return;
  }
  for (int64_t i = 0; i < n; ++i) dx.data()[i] = dy.data()[i] * mask_.data()[i];
}

}  // namespace dnnlab::nn
