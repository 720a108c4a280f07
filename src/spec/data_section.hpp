// The `data:` section of a run spec: its fields, the named data sets' facts
// (one sample's shape, classes, training samples) and the checks between its
// keys. run_spec.cpp reads the rest of the file and checks the model against
// what resolve_data returns.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <string>

#include "nn/spec.hpp"
#include "nn/tensor.hpp"
#include "spec/yaml_reader.hpp"

namespace dnnlab::spec::detail {

void read_data_section(const YamlReader& r, const YAML::Node& map, const std::string& path,
                       nn::DataSpec& d);
void write_data_section(std::string& out, const std::string& indent, const nn::DataSpec& d);

// What the data gives the model: one sample's shape, the classes, and the
// training samples before the validation hold-out.
struct DataFacts {
  nn::Shape sample;
  int64_t classes = 0;
  int64_t train_samples = 0;
};

// The data section's checks between its keys, the defaults that depend on
// the data set (a table's test split, a small set's validation share), and
// the facts the model is checked against: from the named sets' table for a
// name, from the files' headers (data::sample_shape) for a path.
DataFacts resolve_data(const YamlReader& r, const YAML::Node& root, nn::DataSpec& d);

// The node at a path of map keys or, where the path ends early, the deepest
// node on it (the best place to point at for a value that was defaulted).
YAML::Node find_node(const YAML::Node& root, std::initializer_list<const char*> keys);
bool has_key(const YAML::Node& root, const char* key);

}  // namespace dnnlab::spec::detail
