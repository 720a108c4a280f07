// Trains a small MLP for a few steps on generated data and prints the losses
// and a weight checksum as JSON. Built natively and with em++ (wasm SIMD128);
// tests/wasm/compare.mjs checks that the two agree.
#include <cmath>
#include <cstdio>

#include "nn/kernels.hpp"
#include "nn/model.hpp"
#include "nn/train.hpp"

using namespace dnnlab::nn;

int main() {
  ModelSpec spec;
  const char* acts[] = {"relu", "tanh", "sigmoid"};
  for (int i = 0; i < 3; ++i) {
    LayerSpec d;
    d.type = "dense";
    d.attrs.num["units"] = 64;
    spec.layers.push_back(d);
    LayerSpec a;
    a.type = acts[i];
    spec.layers.push_back(a);
  }
  LayerSpec out;
  out.type = "dense";
  out.attrs.num["units"] = 10;
  spec.layers.push_back(out);
  Model model = Model::build(spec, Shape{100}, 10, 42);

  const int n = 512;
  Tensor x(Shape{n, 100});
  std::vector<int32_t> y(n);
  Rng rng(7);
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < 100; ++j) x[i * 100 + j] = rng.normal();
    y[i] = static_cast<int32_t>(rng.below(10));
  }
  TrainSpec ts;
  ts.epochs = 4;
  ts.batch_size = 32;
  ts.seed = 42;
  ts.optimizer.type = "adam";
  ts.optimizer.lr = 1e-3f;
  Trainer trainer(model, ts);
  LabeledData d{x.view(), y.data()};
  auto curve = trainer.fit(d, &d, nullptr);
  double checksum = 0;
  for (Param* p : model.params())
    for (int64_t i = 0; i < p->value.numel(); ++i) checksum += std::fabs(p->value[i]);
  std::printf("{\"kernels\": \"%s\", \"losses\": [", kernels().name);
  for (size_t i = 0; i < curve.size(); ++i)
    std::printf("%s%.9g", i ? ", " : "", curve[i].train_loss);
  // val_acc is absent when the run holds out no validation data: JSON null.
  std::printf("], \"val_acc\": ");
  if (curve.back().val_acc)
    std::printf("%.9g", *curve.back().val_acc);
  else
    std::printf("null");
  std::printf(", \"checksum\": %.9g}\n", checksum);
  return 0;
}
