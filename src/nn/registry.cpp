// The one table of layer types.
#include "nn/registry.hpp"

#include <cmath>
#include <limits>

#include "nn/layers.hpp"

namespace dnnlab::nn {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kBig = 1e9f;

constexpr std::string_view kDenseOptions[] = {"activation", "init", "bias"};
constexpr std::span<const std::string_view> kNoOptions{};

struct ActivationRow {
  std::string_view name;
  Act act;
  float default_alpha;
};
constexpr ActivationRow kActivations[] = {
    {"relu", Act::kRelu, 0.f}, {"leaky_relu", Act::kLeakyRelu, 0.01f}, {"elu", Act::kElu, 1.f},
    {"tanh", Act::kTanh, 0.f}, {"sigmoid", Act::kSigmoid, 0.f},
};

template <Act A, const char* Name>
std::unique_ptr<Layer> make_activation(const LayerSpec& s) {
  return std::make_unique<Activation>(Name, A, s.alpha);
}
constexpr char kRelu[] = "relu", kLeaky[] = "leaky_relu", kElu[] = "elu", kTanh[] = "tanh",
               kSigmoid[] = "sigmoid";

std::unique_ptr<Layer> make_dense(const LayerSpec& s) {
  return std::make_unique<Dense>(s.units, s.init, s.bias);
}
std::unique_ptr<Layer> make_softmax(const LayerSpec&) {
  return std::make_unique<Softmax>();
}
std::unique_ptr<Layer> make_dropout(const LayerSpec& s) {
  return std::make_unique<Dropout>(s.alpha);
}

const LayerInfo kLayers[] = {
    {"dense", ArgKind::kInt, "units", kNaN, 1, kBig, kDenseOptions, make_dense,
     "fully connected: y = x W + b"},
    {"relu", ArgKind::kNone, "", 0.f, 0, 0, kNoOptions, make_activation<Act::kRelu, kRelu>,
     "max(x, 0)"},
    {"leaky_relu", ArgKind::kFloat, "alpha", 0.01f, 0, 1, kNoOptions,
     make_activation<Act::kLeakyRelu, kLeaky>, "x if x > 0 else alpha x"},
    {"elu", ArgKind::kFloat, "alpha", 1.f, 0, kBig, kNoOptions, make_activation<Act::kElu, kElu>,
     "x if x > 0 else alpha (e^x - 1)"},
    {"tanh", ArgKind::kNone, "", 0.f, 0, 0, kNoOptions, make_activation<Act::kTanh, kTanh>,
     "hyperbolic tangent"},
    {"sigmoid", ArgKind::kNone, "", 0.f, 0, 0, kNoOptions, make_activation<Act::kSigmoid, kSigmoid>,
     "1 / (1 + e^-x)"},
    {"softmax", ArgKind::kNone, "", 0.f, 0, 0, kNoOptions, make_softmax,
     "normalized exponentials over the last dimension"},
    {"dropout", ArgKind::kFloat, "alpha", 0.5f, 0, 0.999f, kNoOptions, make_dropout,
     "zeroes a fraction `rate` of units while training"},
};

}  // namespace

std::span<const LayerInfo> layer_registry() {
  return kLayers;
}

const LayerInfo* find_layer(std::string_view name) {
  for (const LayerInfo& l : kLayers)
    if (l.name == name) return &l;
  return nullptr;
}

bool activation_from_name(std::string_view name, Act* act) {
  for (const ActivationRow& r : kActivations)
    if (r.name == name) {
      if (act) *act = r.act;
      return true;
    }
  return false;
}

bool is_initializer(std::string_view name) {
  return name == "he" || name == "glorot" || name == "lecun";
}

}  // namespace dnnlab::nn
