// Plain spec types: what a model and its training run look like, already
// validated and with repeat blocks expanded. src/spec turns YAML into these;
// the wasm API builds them from JSON. Nothing here parses text.
#pragma once
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "nn/errors.hpp"

namespace dnnlab::nn {

// A layer's attribute values by name, as its registry row describes them
// (registry.hpp, LayerInfo::attrs): numbers (integers, floats, booleans as
// 0/1) and strings (enumerations). Readers fill every attribute, defaults
// included, so factories never guess.
struct LayerAttrs {
  std::map<std::string, double, std::less<>> num;
  std::map<std::string, std::string, std::less<>> text;
  double get(std::string_view key, double def = 0) const {
    auto it = num.find(key);
    return it == num.end() ? def : it->second;
  }
  std::string str(std::string_view key) const {
    auto it = text.find(key);
    return it == text.end() ? std::string() : it->second;
  }
  bool operator==(const LayerAttrs&) const = default;
};

// The name `inputs` uses for the model's own input.
inline constexpr const char* kModelInput = "input";

// One node of the model graph.
struct LayerSpec {
  std::string type;                 // a name in the layer registry: "dense", "relu", "add", ...
  std::string name;                 // what other nodes' `inputs` call it; may be empty
  std::vector<std::string> inputs;  // nodes it reads, by name; empty = the node before it
  LayerAttrs attrs;                 // units, alpha, init, ... (see the registry)
  SpecLocation where;               // where it came from, for errors found while building
};

// A named run of consecutive nodes, layers [begin, end): `features`,
// `classifier`. Parts cover the layers in order; a part reads only its own
// nodes and the last node of the part before it, so each part can be built
// and trained alone (Model::build with ModelSpec::part).
struct PartSpec {
  std::string name;
  size_t begin = 0, end = 0;
};

struct ModelSpec {
  std::vector<int64_t> input;     // one sample's shape; empty = taken from the data set
  std::vector<LayerSpec> layers;  // repeat and residual blocks already expanded
  std::vector<PartSpec> parts;    // empty: one unnamed part
  std::string init = "he";        // default initializer of weighted layers
  std::string loss = "softmax_cross_entropy";  // or "mse"
  SpecLocation where;
};

struct OptimizerSpec {
  std::string type = "sgd";  // "sgd" | "adam" | "adamw" | "adagrad" | "rmsprop"
  float lr = 0.01f;
  float momentum = 0.f;   // sgd, rmsprop
  bool nesterov = false;  // sgd
  float weight_decay = 0.f;
  float beta1 = 0.9f, beta2 = 0.999f;  // adam, adamw
  float eps = 1e-8f;                   // adam, adamw, adagrad, rmsprop
  float alpha = 0.99f;                 // rmsprop: smoothing of the squared gradients
  bool centered = false;               // rmsprop: divide by the gradient's variance
  float lr_decay = 0.f;                // adagrad: lr / (1 + (t - 1) lr_decay)
  float initial_accumulator = 0.f;     // adagrad: the sum of squares starts here
};

struct ScheduleSpec {
  std::string type = "constant";  // "constant" | "step" | "cosine"
  int step_epochs = 1;            // step: decay every N epochs
  float gamma = 0.1f;             // step: factor
  float min_lr = 0.f;             // cosine: floor
  int warmup_epochs = 0;          // linear warm-up before either
};

// What is trained on: a data set by name, or files by path (CSV, IDX, .npy,
// .npz; docs/spec.md, "data"). Paths are used as written: a relative one is
// relative to the working directory of whatever loads it.
struct DataSpec {
  std::string dataset = "fashion-mnist";
  int64_t validation = 5000;
  std::string normalize = "standard";  // "standard" | "unit"
  int64_t limit_train = 0;             // >0: use only this many training samples
  std::string path;             // non-empty: the training data's file (dataset names it then)
  std::string format;           // "" (by the file's name) | "csv" | "idx" | "npy" | "npz"
  std::string labels;           // idx, npy: the labels file beside `path`
  std::string test_path;        // the test split's file; else test_fraction of `path`
  std::string test_labels;      // idx, npy: the labels file beside `test_path`
  double test_fraction = 0;     // [0, 1): the test split taken from `path` without test_path
  std::string label_column;     // csv: a column name or 0-based index; "" = the last column
  std::string header = "auto";  // csv: "auto" | "true" | "false" | "counts"

  // Equal keys load the same data: caches of loaded data sets use it.
  std::string key() const {
    std::string k = dataset + "|" + std::to_string(validation) + "|" + normalize + "|" +
                    std::to_string(limit_train);
    if (path.empty()) return k;
    for (const std::string* s :
         {&path, &format, &labels, &test_path, &test_labels, &label_column, &header})
      k += "|" + std::to_string(s->size()) + ":" + *s;
    char fraction[32];
    std::snprintf(fraction, sizeof fraction, "%.17g", test_fraction);
    return k + "|" + fraction;
  }
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
