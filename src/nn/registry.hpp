// The layer registry: one explicit table of every layer type (no static
// initializers), and in it the one description of each layer's attributes
// (name, type, default, range or choices, doc). The YAML reader (src/spec),
// the JSON reader and writer (src/wasm, src/server) and docs/spec.md's layer
// table all follow these rows; none keeps its own list.
//
//   const nn::LayerInfo* info = nn::find_layer("dense");
//   nn::LayerSpec s;  s.type = "dense";
//   s.attrs.num["units"] = 64;
//   nn::fill_defaults(*info, s);                 // init "", bias 1
//   std::unique_ptr<nn::Layer> l = info->make(s);
//
// A new layer needs its class, a row here, a gradient-check case (the test
// walks this table) and a line in docs/spec.md (a test compares the table).
#pragma once
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "nn/layer.hpp"

namespace dnnlab::nn {

enum class AttrKind : uint8_t { kInt, kFloat, kBool, kEnum };

struct AttrInfo {
  std::string_view name;  // as written in specs: "units"
  AttrKind kind;
  double def;                                 // numbers and booleans; NaN = required
  double min, max;                            // inclusive range of numbers
  std::string_view def_text;                  // enumerations: the default choice
  std::span<const std::string_view> choices;  // enumerations: the valid values
  std::string_view doc;
};

// Inputs of a multi-input layer (add, concat): two or more.
inline constexpr int kManyInputs = -1;

struct LayerInfo {
  std::string_view name;     // as written in a spec: "dense"
  std::string_view primary;  // the attribute `- name: VALUE` sets; "" = none
  std::span<const AttrInfo> attrs;
  int inputs;  // 1, or kManyInputs
  std::unique_ptr<Layer> (*make)(const LayerSpec& spec);
  std::string_view summary;
};

std::span<const LayerInfo> layer_registry();
const LayerInfo* find_layer(std::string_view name);  // null if unknown
const AttrInfo* find_attr(const LayerInfo& layer, std::string_view name);

// Why `v` is not a valid value of `a` ("must be in [1, 1e+09]"), or "".
std::string check_attr(const AttrInfo& a, double v);
std::string check_attr(const AttrInfo& a, std::string_view v);
// Sets every attribute `spec` lacks to its default; returns the name of a
// required attribute that is missing, or "".
std::string fill_defaults(const LayerInfo& layer, LayerSpec& spec);
// Whether an attribute holds its default (writers leave those out).
bool is_default(const AttrInfo& a, const LayerSpec& spec);
// A value as specs write it: "64", "0.1", "true", "glorot".
std::string attr_text(const AttrInfo& a, const LayerSpec& spec);
// The markdown table of docs/spec.md ("Layers"), generated from the rows.
std::string layer_table_markdown();

// Activation layers by name, for `activation:` options and kernel fusion.
bool activation_from_name(std::string_view name, Act* act);
// Initializer names accepted in specs: he, glorot, lecun.
bool is_initializer(std::string_view name);

}  // namespace dnnlab::nn
