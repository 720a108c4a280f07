// What the hybrid trainer's wire dtypes lose, measured on the example CNN
// (bench/RESULTS.md, "int8 frames"): along one float32 training run of the
// example's layers (without dropout, so that every pass sees the same
// network), each step also sends the activations and the activation
// gradients through fp16, int8 and int8 with error feedback, and measures
// the error of what arrives and of the weight gradients it makes: per step,
// and summed over the run (what the optimizer integrates).
//
//   wire_error_bench [steps]          (default 150; the installed Fashion-MNIST)
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "data/dataset.hpp"
#include "hybrid/feedback.hpp"
#include "hybrid/wire.hpp"
#include "nn/model.hpp"
#include "nn/train.hpp"
#include "spec/run_spec.hpp"

namespace {

using namespace dnnlab;

// examples/fashion-cnn-distributed.yaml without its two dropout layers.
const char* kSpec = R"(name: wire-error
data: {dataset: fashion-mnist, validation: 0, normalize: standard, limit_train: 10000}
model:
  input: [1, 28, 28]
  init: he
  loss: softmax_cross_entropy
  parts:
    features:
      - {conv2d: 32, kernel: 3, padding: 1}
      - batchnorm
      - relu
      - max_pool2d: 2
      - {conv2d: 64, kernel: 3, padding: 1}
      - batchnorm
      - relu
      - max_pool2d: 2
      - {conv2d: 64, kernel: 3, padding: 1}
      - batchnorm
      - relu
    classifier:
      - dense: 10
train: {epochs: 1, batch_size: 64, seed: 1, optimizer: {type: adam, lr: 0.002}}
)";

std::vector<double> grads_of(const std::vector<nn::Param*>& ps) {
  std::vector<double> g;
  for (nn::Param* p : ps) g.insert(g.end(), p->grad.data(), p->grad.data() + p->grad.numel());
  return g;
}

double norm(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x * x;
  return std::sqrt(s);
}

double rel_rms(const nn::Tensor& got, const nn::Tensor& want) {
  double d = 0, w = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    const double e = static_cast<double>(got.data()[i]) - want.data()[i];
    d += e * e;
    w += static_cast<double>(want.data()[i]) * want.data()[i];
  }
  return std::sqrt(d / (w + 1e-300));
}

// One way of sending a batch tensor: its dtype, with or without feedback.
struct Mode {
  const char* name = "";
  hybrid::Dtype dtype = hybrid::Dtype::kFloat32;
  bool feedback = false;
  hybrid::ErrorFeedback fb;
  double tensor_err = 0, step_err = 0;  // summed over steps
  std::vector<double> cum_diff;         // sum over steps of (its gradient - the true one)
  double sq_diff = 0;                   // sum over steps of |its gradient - the true one|^2

  nn::Tensor send(const nn::Tensor& t) {
    nn::Tensor s = t;
    if (feedback) {
      fb.carry(s, dtype);
      std::vector<float> v(s.data(), s.data() + s.numel());
      hybrid::wire_round(v, dtype);
      std::memcpy(s.data(), v.data(), sizeof(float) * v.size());
    } else {
      hybrid::wire_round({s.data(), static_cast<size_t>(s.numel())}, dtype);
    }
    return s;
  }
  void add(const std::vector<double>& got, const std::vector<double>& want) {
    if (cum_diff.empty()) cum_diff.assign(want.size(), 0);
    std::vector<double> d(want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      d[i] = got[i] - want[i];
      cum_diff[i] += d[i];
    }
    const double n = norm(d);
    sq_diff += n * n;
    step_err += n / (norm(want) + 1e-300);
  }
};

Mode mode(const char* name, hybrid::Dtype dtype, bool feedback) {
  Mode m;
  m.name = name;
  m.dtype = dtype;
  m.feedback = feedback;
  return m;
}

std::vector<Mode> modes() {
  return {mode("fp16", hybrid::Dtype::kFloat16, false), mode("int8", hybrid::Dtype::kInt8, false),
          mode("int8+feedback", hybrid::Dtype::kInt8, true)};
}

void report(const char* what, std::vector<Mode>& ms, const std::vector<double>& cum_true,
            int steps) {
  std::printf("\n%s\n%-14s %12s %12s %14s %12s\n", what, "mode", "tensor err", "grad err/step",
              "summed grad err", "growth");
  for (Mode& m : ms) {
    // growth: |sum of errors| / sqrt(sum of |error|^2): 1 for independent
    // errors, below 1 where they cancel (error feedback's telescoping sum).
    std::printf("%-14s %12.3e %12.3e %14.3e %12.3f\n", m.name, m.tensor_err / steps,
                m.step_err / steps, norm(m.cum_diff) / norm(cum_true),
                norm(m.cum_diff) / std::sqrt(m.sq_diff));
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 150;
  const nn::RunSpec spec = spec::parse_run_spec(kSpec, "wire-error.yaml");
  const data::Dataset d = data::load(data::load_options(spec.data, ""));
  const nn::Shape input = nn::model_input(spec.model, d.sample_shape);
  nn::Model f = nn::Model::build_part(spec.model, "features", input, d.num_classes, 1);
  nn::Model c = nn::Model::build_part(spec.model, "classifier", input, d.num_classes, 1);
  c.set_input_grad(true);
  nn::Optimizer opt_f(spec.train.optimizer, f.params()), opt_c(spec.train.optimizer, c.params());
  const std::vector<int64_t> order = nn::epoch_order(1, 0, d.train.size());
  const int64_t bs = spec.train.batch_size, row = d.train.x.view().cols();
  std::vector<Mode> acts = modes(), grads = modes();
  std::vector<double> cum_c, cum_f;
  int done = 0;
  for (int k = 0; k < steps && (k + 1) * bs <= d.train.size(); ++k, ++done) {
    nn::Shape s = d.train.x.shape();
    s[0] = bs;
    nn::Tensor x(s);
    std::vector<int32_t> y(static_cast<size_t>(bs));
    for (int64_t i = 0; i < bs; ++i) {
      const int64_t src = order[k * bs + i];
      std::memcpy(x.data() + i * row, d.train.x.data() + src * row, sizeof(float) * row);
      y[static_cast<size_t>(i)] = d.train.y[src];
    }
    const nn::TensorView hv = f.forward(x.view(), true);
    nn::Tensor h(hv.shape());
    std::memcpy(h.data(), hv.data(), sizeof(float) * h.numel());
    // The classifier's gradients from the activations as each mode sends them.
    std::vector<std::vector<double>> gc;
    for (Mode& m : acts) {
      const nn::Tensor sent = m.send(h);
      m.tensor_err += rel_rms(sent, h);
      c.backward_loss(sent.view(), y.data());
      gc.push_back(grads_of(c.params()));
    }
    c.backward_loss(h.view(), y.data());
    const std::vector<double> gc_true = grads_of(c.params());
    if (cum_c.empty()) cum_c.assign(gc_true.size(), 0);
    for (size_t i = 0; i < gc_true.size(); ++i) cum_c[i] += gc_true[i];
    for (size_t j = 0; j < acts.size(); ++j) acts[j].add(gc[j], gc_true);
    nn::Tensor dh(c.input_grad().shape());
    std::memcpy(dh.data(), c.input_grad().data(), sizeof(float) * dh.numel());
    opt_c.step();
    // The features' gradients from the activation gradients as each mode sends them.
    std::vector<std::vector<double>> gf;
    for (Mode& m : grads) {
      const nn::Tensor sent = m.send(dh);
      m.tensor_err += rel_rms(sent, dh);
      f.forward(x.view(), true);
      f.backward_from("features", sent.view());
      gf.push_back(grads_of(f.params()));
    }
    f.forward(x.view(), true);
    f.backward_from("features", dh.view());
    const std::vector<double> gf_true = grads_of(f.params());
    if (cum_f.empty()) cum_f.assign(gf_true.size(), 0);
    for (size_t i = 0; i < gf_true.size(); ++i) cum_f[i] += gf_true[i];
    for (size_t j = 0; j < grads.size(); ++j) grads[j].add(gf[j], gf_true);
    opt_f.step();
  }
  std::printf("%d steps of batch %lld on the example CNN (no dropout), float32 trajectory\n", done,
              static_cast<long long>(bs));
  report("activations -> the classifier's weight gradients", acts, cum_c, done);
  report("activation gradients -> the features' weight gradients", grads, cum_f, done);
  return 0;
}
