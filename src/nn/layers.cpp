// Built-in layers: Dense (with fused activation), activations, Softmax,
// Dropout, Flatten, BatchNorm, Add, Concat.
#include "nn/layers.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "nn/parallel.hpp"

namespace dnnlab::nn {

void Layer::bind(const Shape& in, Rng* rng, const SpecLocation& where) {
  bind(std::span<const Shape>(&in, 1), rng, where);
}

void Layer::bind(std::span<const Shape> ins, Rng* rng, const SpecLocation& where) {
  if (!multi_input() && ins.size() != 1)
    throw SpecError(where, "inputs",
                    std::string(type_) + " takes one input, got " + std::to_string(ins.size()));
  if (multi_input() && ins.size() < 2)
    throw SpecError(
        where, "inputs",
        std::string(type_) + " takes two or more inputs, got " + std::to_string(ins.size()));
  const ShapeContract c = contract();
  for (const Shape& in : ins) {
    const int rank = in.rank;
    if (rank < c.min_rank || rank > c.max_rank)
      throw SpecError(where, type_,
                      "takes inputs of " + std::to_string(c.min_rank) + ".." +
                          std::to_string(c.max_rank) + " dimensions per sample, got " + in.str());
    for (int i = 0; i < rank; ++i)
      if (in[i] <= 0)
        throw SpecError(where, type_, "input shape " + in.str() + " has an empty dimension");
  }
  ins_.assign(ins.begin(), ins.end());
  in_ = ins[0];
  out_ = infer_n(ins, where);
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
  const float beta = accumulate_grads() ? 1.f : 0.f;
  // dy's density matters unless x already serves dW and there is no dx.
  const bool dy_sparse = (!x_sparse_ || dx.data()) && use_spmm(kn, dy.data(), m, n, n, k);
  if (x_sparse_) {  // x is the forward's x: its density was counted there
    kn.spmm(sparse_.from_cols(kn, x.data(), m, k, k), n, dy.data(), n, beta, dw, n, nullptr);
  } else if (dy_sparse) {
    scratch_.resize(size_t(n) * k * (beta != 0.f ? 2 : 1));
    kn.spmm(sparse_.from_cols(kn, dy.data(), m, n, n), k, x.data(), k, 0.f, scratch_.data(), k,
            nullptr);
    if (beta == 0.f) {
      kn.transpose(scratch_.data(), n, k, k, dw, n);
    } else {  // accumulating: transpose aside, then add
      float* t = scratch_.data() + size_t(n) * k;
      kn.transpose(scratch_.data(), n, k, k, t, n);
      for (size_t i = 0, e = size_t(n) * k; i < e; ++i) dw[i] += t[i];
    }
  } else {
    kn.sgemm(Trans::kYes, Trans::kNo, k, n, m, 1.f, x.data(), k, dy.data(), n, beta, dw, n,
             nullptr);
  }
  if (has_bias_) kn.col_sum(dy.data(), m, n, n, bias_.grad.data(), beta != 0.f);
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

namespace {

// f(offset, count) over [0, n) elements in fixed parts of whole rows, on the
// parallel-for hook when there is enough work (a CNN's feature maps; the
// parts depend on the shape only, and the ops are elementwise, so any thread
// count gives the same bits). Serial, an activation layer of the Fashion CNN
// was a fifth of its two-thread step.
template <class F>
void for_row_parts(int64_t rows, int64_t n, F f) {
  constexpr int64_t kMinParallel = int64_t{1} << 16;  // floats
  if (rows <= 1 || n < kMinParallel) {
    f(int64_t{0}, n);
    return;
  }
  const int64_t per = n / rows;
  parallel_for(static_cast<int>(rows), [&](int r) { f(r * per, per); });
}

}  // namespace

void Activation::forward(const TensorView& x, const TensorView& y, ForwardContext&) {
  const Kernels& kn = kernels();
  for_row_parts(x.rows(), x.numel(), [&](int64_t o, int64_t cnt) {
    kn.act_forward(act_, alpha_, x.data() + o, y.data() + o, size_t(cnt));
  });
}

void Activation::backward(const TensorView&, const TensorView& y, const TensorView& dy,
                          const TensorView& dx) {
  if (!dx.data()) return;
  const Kernels& kn = kernels();
  for_row_parts(y.rows(), y.numel(), [&](int64_t o, int64_t cnt) {
    kn.act_backward(act_, alpha_, y.data() + o, dy.data() + o, dx.data() + o, size_t(cnt));
  });
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

// ---- Flatten --------------------------------------------------------------

void Flatten::forward(const TensorView& x, const TensorView& y, ForwardContext&) {
  if (y.data() != x.data()) std::memcpy(y.data(), x.data(), sizeof(float) * x.numel());
}

void Flatten::backward(const TensorView&, const TensorView&, const TensorView& dy,
                       const TensorView& dx) {
  if (dx.data() && dx.data() != dy.data())
    std::memcpy(dx.data(), dy.data(), sizeof(float) * dy.numel());
}

// ---- BatchNorm ------------------------------------------------------------

void BatchNorm::init_params(Rng&) {
  const int64_t c = channels();
  auto make = [c](Param& p, const char* name, float v, bool trainable) {
    p.name = name;
    p.value.resize(Shape{c});
    p.value.view().fill(v);
    if (trainable) p.grad.resize(Shape{c});
  };
  make(gamma_, "weight", 1.f, true);
  make(beta_, "bias", 0.f, true);
  make(running_mean_, "running_mean", 0.f, false);
  make(running_var_, "running_var", 1.f, false);
}

std::string BatchNorm::describe() const {
  return "batchnorm " + in_shape().str() + " momentum " + std::to_string(momentum_);
}

// x viewed as [B, C, S]: channel c of sample b is the S values at (b*C + c)*S.
//
// Speed (it was a third of a 700-block residual MLP's time, a sixth of the
// Fashion CNN's): the sums over a plane run in kLanes independent double
// accumulators, so they pipeline and vectorize without -ffast-math (the
// order of the additions is written out, so every target gives the same
// bits); dense inputs (S = 1) are swept row by row, a vector over channels;
// [C, H, W] inputs split their channels over nn::parallel_for (each channel
// is one work item whatever the thread count, so the bits do not change).
namespace {

constexpr int kLanes = 8;

// sum_j f(p[j]) for j < n, in kLanes accumulators reduced in a fixed order.
template <class F>
double lane_sum(const float* p, int64_t n, F f) {
  double acc[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] += f(j + l);
  for (int l = 0; j < n; ++j, ++l) acc[l] += f(j);
  double s = 0;
  for (int l = 0; l < kLanes; ++l) s += acc[l];
  return s;
}

// Runs body(ch) for every channel: through the parallel hook when the
// channels are planes (enough work per item), in order otherwise.
template <class F>
void for_channels(int64_t c, int64_t sp, F body) {
  if (sp > 1) {
    parallel_for(static_cast<int>(c), [&body](int ch) { body(ch); });
  } else {
    for (int64_t ch = 0; ch < c; ++ch) body(ch);
  }
}

}  // namespace

void BatchNorm::forward(const TensorView& x, const TensorView& y, ForwardContext& ctx) {
  const int64_t b = x.rows(), c = channels(), sp = positions();
  mean_.assign(size_t(c), 0.f);
  invstd_.assign(size_t(c), 0.f);
  batch_stats_ = ctx.training;
  const float* xd = x.data();
  float* yd = y.data();
  std::vector<double> sum, sq;  // dense inputs: per-channel sums, row by row
  if (ctx.training && sp == 1) {
    sum.assign(size_t(c), 0.0);
    sq.assign(size_t(c), 0.0);
    for (int64_t i = 0; i < b; ++i)
      for (int64_t ch = 0; ch < c; ++ch) sum[ch] += xd[i * c + ch];
    for (int64_t ch = 0; ch < c; ++ch) sum[ch] /= static_cast<double>(b);
    for (int64_t i = 0; i < b; ++i)
      for (int64_t ch = 0; ch < c; ++ch) {
        const double d = xd[i * c + ch] - sum[ch];
        sq[ch] += d * d;
      }
  }
  auto stats = [&](int64_t ch) {
    float mean, var;
    if (ctx.training) {
      const double n = static_cast<double>(b * sp);
      double m, s2;
      if (sp == 1) {
        m = sum[ch], s2 = sq[ch];
      } else {
        double s = 0;
        for (int64_t i = 0; i < b; ++i) {
          const float* p = xd + (i * c + ch) * sp;
          s += lane_sum(p, sp, [p](int64_t j) { return double(p[j]); });
        }
        m = s / n;
        s2 = 0;
        for (int64_t i = 0; i < b; ++i) {
          const float* p = xd + (i * c + ch) * sp;
          s2 += lane_sum(p, sp, [p, m](int64_t j) { return (p[j] - m) * (p[j] - m); });
        }
      }
      mean = static_cast<float>(m);
      var = static_cast<float>(s2 / n);
      const float unbiased = n > 1 ? static_cast<float>(s2 / (n - 1)) : var;
      float& rm = running_mean_.value[ch];
      float& rv = running_var_.value[ch];
      rm = (1.f - momentum_) * rm + momentum_ * mean;
      rv = (1.f - momentum_) * rv + momentum_ * unbiased;
    } else {
      mean = running_mean_.value[ch];
      var = running_var_.value[ch];
    }
    mean_[ch] = mean, invstd_[ch] = 1.f / std::sqrt(var + eps_);
  };
  if (sp == 1) {
    for (int64_t ch = 0; ch < c; ++ch) stats(ch);
    const size_t nc = static_cast<size_t>(c);
    std::vector<float> g(nc), sh(nc);
    for (int64_t ch = 0; ch < c; ++ch) {
      g[ch] = gamma_.value[ch] * invstd_[ch];
      sh[ch] = beta_.value[ch] - mean_[ch] * g[ch];
    }
    for (int64_t i = 0; i < b; ++i)
      for (int64_t ch = 0; ch < c; ++ch) yd[i * c + ch] = xd[i * c + ch] * g[ch] + sh[ch];
    return;
  }
  for_channels(c, sp, [&](int64_t ch) {
    stats(ch);
    const float g = gamma_.value[ch] * invstd_[ch], sh = beta_.value[ch] - mean_[ch] * g;
    for (int64_t i = 0; i < b; ++i) {
      const float* p = xd + (i * c + ch) * sp;
      float* q = yd + (i * c + ch) * sp;
      for (int64_t j = 0; j < sp; ++j) q[j] = p[j] * g + sh;
    }
  });
}

void BatchNorm::backward(const TensorView& x, const TensorView&, const TensorView& dy,
                         const TensorView& dx) {
  const int64_t b = x.rows(), c = channels(), sp = positions();
  const bool acc = accumulate_grads();
  const float* xd = x.data();
  const float* g = dy.data();
  float* dxd = dx.data();
  const float n = static_cast<float>(b * sp);
  // With batch statistics the mean and variance depend on x too:
  // dx = gamma*invstd * (dy - mean(dy) - xhat * mean(dy * xhat)).
  auto finish = [&](int64_t ch, double sdy, double sdyx) {
    gamma_.grad[ch] = static_cast<float>(sdyx) + (acc ? gamma_.grad[ch] : 0.f);
    beta_.grad[ch] = static_cast<float>(sdy) + (acc ? beta_.grad[ch] : 0.f);
  };
  if (sp == 1) {
    std::vector<double> sdy(size_t(c), 0.0), sdyx(size_t(c), 0.0);
    for (int64_t i = 0; i < b; ++i)
      for (int64_t ch = 0; ch < c; ++ch) {
        const int64_t o = i * c + ch;
        sdy[ch] += g[o];
        sdyx[ch] += g[o] * (xd[o] - mean_[ch]) * invstd_[ch];
      }
    for (int64_t ch = 0; ch < c; ++ch) finish(ch, sdy[ch], sdyx[ch]);
    if (!dxd) return;
    const size_t nc = static_cast<size_t>(c);
    std::vector<float> gi(nc), a(nc), k(nc);
    for (int64_t ch = 0; ch < c; ++ch) {
      gi[ch] = gamma_.value[ch] * invstd_[ch];
      a[ch] = batch_stats_ ? static_cast<float>(sdy[ch]) / n : 0.f;
      k[ch] = batch_stats_ ? static_cast<float>(sdyx[ch]) / n : 0.f;
    }
    for (int64_t i = 0; i < b; ++i)
      for (int64_t ch = 0; ch < c; ++ch) {
        const int64_t o = i * c + ch;
        const float xh = (xd[o] - mean_[ch]) * invstd_[ch];
        dxd[o] = gi[ch] * (g[o] - a[ch] - xh * k[ch]);
      }
    return;
  }
  for_channels(c, sp, [&](int64_t ch) {
    const float m = mean_[ch], is = invstd_[ch];
    double sdy = 0, sdyx = 0;  // sum dy, sum dy * xhat
    for (int64_t i = 0; i < b; ++i) {
      const int64_t o = (i * c + ch) * sp;
      const float* gp = g + o;
      const float* xp = xd + o;
      sdy += lane_sum(gp, sp, [gp](int64_t j) { return double(gp[j]); });
      sdyx +=
          lane_sum(gp, sp, [gp, xp, m, is](int64_t j) { return double(gp[j] * (xp[j] - m) * is); });
    }
    finish(ch, sdy, sdyx);
    if (!dxd) return;
    const float gi = gamma_.value[ch] * is;
    const float a = batch_stats_ ? static_cast<float>(sdy) / n : 0.f;
    const float k = batch_stats_ ? static_cast<float>(sdyx) / n : 0.f;
    for (int64_t i = 0; i < b; ++i) {
      const int64_t o = (i * c + ch) * sp;
      for (int64_t j = 0; j < sp; ++j) {
        const float xh = (xd[o + j] - m) * is;
        dxd[o + j] = gi * (g[o + j] - a - xh * k);
      }
    }
  });
}

// ---- Add ------------------------------------------------------------------

Shape Add::infer_n(std::span<const Shape> in, const SpecLocation& where) const {
  for (const Shape& s : in)
    if (!(s == in[0]))
      throw SpecError(where, "inputs",
                      "add needs inputs of one shape, got " + in[0].str() + " and " + s.str());
  return in[0];
}

void Add::forward_n(std::span<const TensorView> xs, const TensorView& y, ForwardContext&) {
  const int64_t n = y.numel();
  float* o = y.data();
  const float* a = xs[0].data();
  const float* b = xs[1].data();
  for (int64_t i = 0; i < n; ++i) o[i] = a[i] + b[i];
  for (size_t k = 2; k < xs.size(); ++k) {
    const float* c = xs[k].data();
    for (int64_t i = 0; i < n; ++i) o[i] += c[i];
  }
}

void Add::backward_n(std::span<const TensorView>, const TensorView&, const TensorView& dy,
                     std::span<const TensorView> dxs) {
  for (const TensorView& dx : dxs)
    if (dx.data() && dx.data() != dy.data())
      std::memcpy(dx.data(), dy.data(), sizeof(float) * dy.numel());
}

// ---- Concat ---------------------------------------------------------------

Shape Concat::infer_n(std::span<const Shape> in, const SpecLocation& where) const {
  Shape out = in[0];
  for (size_t k = 1; k < in.size(); ++k) {
    bool ok = in[k].rank == out.rank;
    for (int d = 1; ok && d < out.rank; ++d) ok = in[k][d] == out[d];
    if (!ok)
      throw SpecError(where, "inputs",
                      "concat joins the first dimension; the others must agree, got " +
                          in[0].str() + " and " + in[k].str());
    out[0] += in[k][0];
  }
  return out;
}

void Concat::forward_n(std::span<const TensorView> xs, const TensorView& y, ForwardContext&) {
  const int64_t b = y.rows(), row = y.cols();
  int64_t off = 0;
  for (const TensorView& x : xs) {
    const int64_t w = x.cols();
    for (int64_t i = 0; i < b; ++i)
      std::memcpy(y.data() + i * row + off, x.data() + i * w, sizeof(float) * w);
    off += w;
  }
}

void Concat::backward_n(std::span<const TensorView> xs, const TensorView&, const TensorView& dy,
                        std::span<const TensorView> dxs) {
  const int64_t b = dy.rows(), row = dy.cols();
  int64_t off = 0;
  for (size_t k = 0; k < xs.size(); ++k) {
    const int64_t w = xs[k].cols();
    if (dxs[k].data())
      for (int64_t i = 0; i < b; ++i)
        std::memcpy(dxs[k].data() + i * w, dy.data() + i * row + off, sizeof(float) * w);
    off += w;
  }
}

}  // namespace dnnlab::nn
