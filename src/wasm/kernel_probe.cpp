// dnnlab_kernel_probe: the wasm core's kernel table (wasm-simd128), its
// optimizers, BatchNorm and softmax cross-entropy behind a flat C API, so
// that the WebGPU kernels (src/wasm/webgpu/) are checked against exactly what
// the wasm core computes (tests/browser/webgpu_kernels.test.mjs). A test
// build, not shipped: pointers are offsets into wasm memory, shapes come as
// int arrays, and a bad argument is the caller's bug (returns -1, no throw).
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "nn/kernels.hpp"
#include "nn/layers.hpp"
#include "nn/loss.hpp"
#include "nn/optim.hpp"
#include "nn/rng.hpp"

#ifdef __EMSCRIPTEN__
#include <emscripten/emscripten.h>
#define PROBE_API extern "C" EMSCRIPTEN_KEEPALIVE
#else
#define PROBE_API extern "C"
#endif

namespace nn = dnnlab::nn;

namespace {
nn::ConvShape conv_shape(const int32_t* s) {
  return nn::ConvShape{s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7], s[8], s[9], s[10]};
}
nn::PoolShape pool_shape(const int32_t* s) {
  return nn::PoolShape{s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7], s[8], s[9]};
}
nn::Act act_of(int a) {
  return static_cast<nn::Act>(a);
}
}  // namespace

PROBE_API const char* probe_kernels_name() {
  return nn::kernels().name;
}

PROBE_API void probe_sgemm(int ta, int tb, int m, int n, int k, float alpha, const float* a,
                           int lda, const float* b, int ldb, float beta, float* c, int ldc,
                           const float* bias, int act, float act_alpha) {
  const nn::Epilogue ep{bias, act_of(act), act_alpha};
  nn::kernels().sgemm(ta ? nn::Trans::kYes : nn::Trans::kNo, tb ? nn::Trans::kYes : nn::Trans::kNo,
                      m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, &ep);
}

PROBE_API void probe_act_forward(int act, float alpha, const float* x, float* y, int n) {
  nn::kernels().act_forward(act_of(act), alpha, x, y, size_t(n));
}

PROBE_API void probe_act_backward(int act, float alpha, const float* y, const float* dy, float* dx,
                                  int n) {
  nn::kernels().act_backward(act_of(act), alpha, y, dy, dx, size_t(n));
}

PROBE_API void probe_col_sum(const float* a, int m, int n, int lda, float* out, int accumulate) {
  nn::kernels().col_sum(a, m, n, lda, out, accumulate != 0);
}

PROBE_API void probe_conv_forward(const int32_t* shape, const float* x, const float* w,
                                  const float* bias, int act, float alpha, float* y) {
  nn::kernels().conv2d_forward(conv_shape(shape), x, w, bias, act_of(act), alpha, y);
}

PROBE_API void probe_conv_backward_data(const int32_t* shape, const float* w, const float* dy,
                                        float* dx) {
  nn::kernels().conv2d_backward_data(conv_shape(shape), w, dy, dx);
}

PROBE_API void probe_conv_backward_filter(const int32_t* shape, const float* x, const float* dy,
                                          float* dw, float* db, int accumulate) {
  nn::kernels().conv2d_backward_filter(conv_shape(shape), x, dy, dw, db, accumulate != 0);
}

PROBE_API void probe_pool_forward(int kind, const int32_t* shape, const float* x, float* y,
                                  int32_t* argmax) {
  nn::kernels().pool2d_forward(static_cast<nn::Pool>(kind), pool_shape(shape), x, y, argmax);
}

PROBE_API void probe_pool_backward(int kind, const int32_t* shape, const float* dy,
                                   const int32_t* argmax, float* dx) {
  nn::kernels().pool2d_backward(static_cast<nn::Pool>(kind), pool_shape(shape), dy, argmax, dx);
}

// rows x cols logits; writes the mean-reduced gradient; returns the mean loss.
PROBE_API float probe_softmax_ce(int rows, int cols, float* logits, const int32_t* labels,
                                 float* grad, int32_t* correct) {
  int64_t hits = 0;
  const float loss =
      nn::softmax_cross_entropy(nn::TensorView(logits, nn::Shape{rows, cols}), labels,
                                nn::TensorView(grad, nn::Shape{rows, cols}), &hits);
  *correct = static_cast<int32_t>(hits);
  return loss;
}

// `steps` optimizer steps (nn::Optimizer, optim.cpp) on n parameters w, the
// t-th with gradient g[t * n ..]. f = {lr, momentum, weight_decay, beta1,
// beta2, eps, alpha, lr_decay, initial_accumulator}, flags = nesterov | 2 *
// centered. type: "sgd", "adam", "adamw", "adagrad", "rmsprop".
PROBE_API int probe_optimizer(const char* type, const float* f, int flags, float* w, const float* g,
                              int n, int steps) {
  nn::OptimizerSpec s;
  s.type = type;
  s.lr = f[0], s.momentum = f[1], s.weight_decay = f[2], s.beta1 = f[3], s.beta2 = f[4];
  s.eps = f[5], s.alpha = f[6], s.lr_decay = f[7], s.initial_accumulator = f[8];
  s.nesterov = flags & 1, s.centered = (flags & 2) != 0;
  nn::Param p;
  p.value.resize(nn::Shape{n});
  p.grad.resize(nn::Shape{n});
  std::memcpy(p.value.data(), w, sizeof(float) * size_t(n));
  try {
    nn::Optimizer opt(s, {&p});
    for (int t = 0; t < steps; ++t) {
      std::memcpy(p.grad.data(), g + size_t(t) * size_t(n), sizeof(float) * size_t(n));
      opt.step();
    }
  } catch (...) {
    return -1;
  }
  std::memcpy(w, p.value.data(), sizeof(float) * size_t(n));
  return 0;
}

// BatchNorm (nn::BatchNorm) on x [b, c, sp] (sp = 1: a dense [b, c] input):
// forward (training or with the running statistics), then, in training,
// backward with dy. io = {gamma[c], beta[c], running_mean[c], running_var[c]}
// in, the running statistics updated in place; out: y, dx, dgamma, dbeta.
PROBE_API int probe_batchnorm(int b, int c, int sp, float momentum, float eps, int training,
                              const float* x, float* io, float* y, const float* dy, float* dx,
                              float* dgamma, float* dbeta) {
  try {
    nn::BatchNorm bn(momentum, eps);
    nn::Rng rng(1);
    bn.bind(sp == 1 ? nn::Shape{c} : nn::Shape{c, sp}, &rng, {});
    std::vector<nn::Param*> ps = bn.params(), st = bn.state();
    nn::Param* all[4] = {ps[0], ps[1], st[0], st[1]};
    for (int i = 0; i < 4; ++i) std::memcpy(all[i]->value.data(), io + i * c, sizeof(float) * c);
    const nn::Shape xs = sp == 1 ? nn::Shape{b, c} : nn::Shape{b, c, sp};
    nn::TensorView xv(const_cast<float*>(x), xs), yv(y, xs);
    nn::ForwardContext ctx;
    ctx.training = training != 0;
    ctx.rng = &rng;
    bn.forward(xv, yv, ctx);
    if (training) {
      bn.backward(xv, yv, nn::TensorView(const_cast<float*>(dy), xs), nn::TensorView(dx, xs));
      std::memcpy(dgamma, ps[0]->grad.data(), sizeof(float) * c);
      std::memcpy(dbeta, ps[1]->grad.data(), sizeof(float) * c);
    }
    for (int i = 2; i < 4; ++i) std::memcpy(io + i * c, all[i]->value.data(), sizeof(float) * c);
  } catch (...) {
    return -1;
  }
  return 0;
}
