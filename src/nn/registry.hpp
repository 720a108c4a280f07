// The layer registry: one explicit table of every layer type (no static
// initializers). A new layer needs its class, a row here, a gradient-check
// test and a spec example.
#pragma once
#include <memory>
#include <span>
#include <string_view>

#include "nn/layer.hpp"

namespace dnnlab::nn {

enum class ArgKind : uint8_t { kNone, kInt, kFloat };

struct LayerInfo {
  std::string_view name;       // as written in a spec: "dense"
  ArgKind arg;                 // what `- name: VALUE` carries (units, slope, rate)
  std::string_view arg_field;  // LayerSpec field it fills: "units" | "alpha" | ""
  float arg_default;           // when the value is omitted (`- relu`); NaN = required
  float arg_min, arg_max;      // inclusive valid range of the value
  // Option keys allowed beside the name (besides "repeat"): e.g. dense takes
  // "activation", "init", "bias".
  std::span<const std::string_view> options;
  std::unique_ptr<Layer> (*make)(const LayerSpec& spec);
  std::string_view summary;
};

std::span<const LayerInfo> layer_registry();
const LayerInfo* find_layer(std::string_view name);  // null if unknown

// Activation layers by name, for `activation:` options and kernel fusion.
bool activation_from_name(std::string_view name, Act* act);
// Initializer names accepted in specs: he, glorot, lecun.
bool is_initializer(std::string_view name);

}  // namespace dnnlab::nn
