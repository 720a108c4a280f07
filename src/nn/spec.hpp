// Plain spec types: what a model and its training run look like, already
// validated and with repeat blocks expanded. src/spec turns YAML into these;
// the wasm API builds them from JSON. Nothing here parses text.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "nn/errors.hpp"

namespace dnnlab::nn {

struct LayerSpec {
  std::string type;    // a name in the layer registry: "dense", "relu", ...
  int64_t units = 0;   // dense: output width
  float alpha = 0.f;   // leaky_relu slope, elu alpha, dropout rate
  std::string init;    // dense: "he" | "glorot" | "lecun"; empty = the model's default
  bool bias = true;    // dense
  SpecLocation where;  // where it came from, for errors found while building
};

struct ModelSpec {
  std::vector<int64_t> input;     // one sample's shape; empty = taken from the data set
  std::vector<LayerSpec> layers;  // repeat blocks already expanded
  std::string init = "he";        // default initializer of weighted layers
  std::string loss = "softmax_cross_entropy";  // or "mse"
  SpecLocation where;
};

struct OptimizerSpec {
  std::string type = "sgd";  // "sgd" | "adam" | "adamw"
  float lr = 0.01f;
  float momentum = 0.f;   // sgd
  bool nesterov = false;  // sgd
  float weight_decay = 0.f;
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;  // adam, adamw
};

struct ScheduleSpec {
  std::string type = "constant";  // "constant" | "step" | "cosine"
  int step_epochs = 1;            // step: decay every N epochs
  float gamma = 0.1f;             // step: factor
  float min_lr = 0.f;             // cosine: floor
  int warmup_epochs = 0;          // linear warm-up before either
};

struct DataSpec {
  std::string dataset = "fashion-mnist";
  int64_t validation = 5000;
  std::string normalize = "standard";  // "standard" | "unit"
  int64_t limit_train = 0;             // >0: use only this many training samples
};

struct TrainSpec {
  int epochs = 10;
  int batch_size = 64;
  uint64_t seed = 1;
  OptimizerSpec optimizer;
  ScheduleSpec schedule;
};

// Everything `dnnlab train` needs: what is trained, on what, and how.
struct RunSpec {
  std::string name;
  ModelSpec model;
  DataSpec data;
  TrainSpec train;
  std::string source;  // the spec text it was parsed from, kept for provenance
};

}  // namespace dnnlab::nn
