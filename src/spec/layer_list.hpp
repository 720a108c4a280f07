// The `model.layers` list: reading it (layer entries, `activation:`
// shorthands, nested `repeat:` blocks, all expanded) and writing it back in
// canonical form with runs of equal layers folded into `repeat:` blocks.
#pragma once
#include <string>
#include <vector>

#include "nn/spec.hpp"
#include "spec/yaml_reader.hpp"

namespace dnnlab::spec::detail {

// More expanded layers than this is a mistake (or an attack on the server),
// not a model.
inline constexpr size_t kMaxLayers = 100000;
inline constexpr int64_t kMaxRepeat = 100000;

struct LayerList {
  std::vector<nn::LayerSpec> layers;  // expanded
  std::vector<std::string> paths;     // each layer's entry, e.g. "model.layers[3]"
};

// Reads a non-empty list of layer entries (see docs/spec.md).
LayerList read_layer_list(const YamlReader& r, const YAML::Node& list, const std::string& path);

// Appends the list as YAML block sequence items, each line indented by `indent`.
void write_layer_list(std::string& out, const std::vector<nn::LayerSpec>& layers,
                      const std::string& indent);

// Layers equal in everything but where they came from.
bool same_layer(const nn::LayerSpec& a, const nn::LayerSpec& b);

}  // namespace dnnlab::spec::detail
