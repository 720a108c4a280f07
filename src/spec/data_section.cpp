// The `data:` section of a run spec (see data_section.hpp and docs/spec.md).
#include "spec/data_section.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <limits>

#include "data/dataset.hpp"
#include "spec/run_spec.hpp"

namespace dnnlab::spec {
namespace {

using detail::Field;
using detail::YamlReader;

constexpr double kInf = std::numeric_limits<double>::infinity();

// One sample's shape is the shape training feeds the model (data::load's
// Dataset::sample_shape: images keep [channels, height, width]), so that a
// spec is validated as the model it will train. tests/cli checks these
// against the data files' headers (data::sample_shape).
struct DatasetInfo {
  std::string_view name;
  std::array<int64_t, 3> sample;  // one sample's dims, rank of them
  int rank;
  int64_t classes;
  int64_t train_samples;
  nn::Shape shape() const {
    nn::Shape s;
    for (int i = 0; i < rank; ++i) s[s.rank++] = sample[i];
    return s;
  }
};
constexpr DatasetInfo kDatasets[] = {
    {"fashion-mnist", {1, 28, 28}, 3, 10, 60000},
    {"mnist", {1, 28, 28}, 3, 10, 60000},
    {"synthetic", {784, 0, 0}, 1, 10, 1000000},  // generated in memory: tests and benchmarks
    // python3-sklearn's tables, read through the CSV path (src/data/dataset.cpp);
    // tests/spec/data_spec_test.cpp checks these against the files.
    {"digits", {64, 0, 0}, 1, 10, 1797},
    {"breast-cancer", {30, 0, 0}, 1, 2, 569},
    {"wine", {13, 0, 0}, 1, 3, 178},
    {"iris", {4, 0, 0}, 1, 3, 150},
};
constexpr std::string_view kDatasetNames[] = {"fashion-mnist", "mnist", "synthetic", "digits",
                                              "breast-cancer", "wine",  "iris"};
// Tables without a test file: this share of them is the test split unless
// the spec says otherwise.
constexpr float kTableTestFraction = 0.2f;
constexpr std::string_view kFormats[] = {"csv", "idx", "npy", "npz"};
constexpr std::string_view kHeaders[] = {"auto", "true", "false", "counts"};
static_assert(std::size(kDatasetNames) == std::size(kDatasets));

constexpr std::string_view kNormalizations[] = {"standard", "unit"};

const DatasetInfo* find_dataset(std::string_view name) {
  for (const DatasetInfo& d : kDatasets)
    if (d.name == name) return &d;
  return nullptr;
}

std::string str(int64_t v) {
  return std::to_string(v);
}
std::string str(float v) {
  return detail::yaml_float(v);
}

// ---- data ------------------------------------------------------------------

constexpr Field<nn::DataSpec> kDataFields[] = {
    {"dataset",
     [](const YamlReader& r, const YAML::Node& v, const std::string& p, nn::DataSpec& d) {
       d.dataset = r.choice(v, p, "data set", kDatasetNames);
     },
     // A data set by path is named by its file; `dataset:` is not written then.
     [](const nn::DataSpec& d) { return d.path.empty() ? detail::yaml_string(d.dataset) : ""; }},
    {"validation",
     [](const YamlReader& r, const YAML::Node& v, const std::string& p, nn::DataSpec& d) {
       d.validation = r.integer(v, p, {0, kInf});
     },
     [](const nn::DataSpec& d) { return str(d.validation); }},
    {"normalize",
     [](const YamlReader& r, const YAML::Node& v, const std::string& p, nn::DataSpec& d) {
       d.normalize = r.choice(v, p, "normalization", kNormalizations);
     },
     [](const nn::DataSpec& d) { return d.normalize; }},
    {"limit_train",
     [](const YamlReader& r, const YAML::Node& v, const std::string& p, nn::DataSpec& d) {
       d.limit_train = r.integer(v, p, {0, kInf});
     },
     [](const nn::DataSpec& d) { return str(d.limit_train); }},
    {"path",
     [](const YamlReader& r, const YAML::Node& v, const std::string& p, nn::DataSpec& d) {
       d.path = r.string(v, p);
     },
     [](const nn::DataSpec& d) { return d.path.empty() ? "" : detail::yaml_string(d.path); }},
    {"format",
     [](const YamlReader& r, const YAML::Node& v, const std::string& p, nn::DataSpec& d) {
       d.format = r.choice(v, p, "data format", kFormats);
     },
     [](const nn::DataSpec& d) { return d.format; }},
    {"labels",
     [](const YamlReader& r, const YAML::Node& v, const std::string& p, nn::DataSpec& d) {
       d.labels = r.string(v, p);
     },
     [](const nn::DataSpec& d) { return d.labels.empty() ? "" : detail::yaml_string(d.labels); }},
    {"test_path",
     [](const YamlReader& r, const YAML::Node& v, const std::string& p, nn::DataSpec& d) {
       d.test_path = r.string(v, p);
     },
     [](const nn::DataSpec& d) {
       return d.test_path.empty() ? "" : detail::yaml_string(d.test_path);
     }},
    {"test_labels",
     [](const YamlReader& r, const YAML::Node& v, const std::string& p, nn::DataSpec& d) {
       d.test_labels = r.string(v, p);
     },
     [](const nn::DataSpec& d) {
       return d.test_labels.empty() ? "" : detail::yaml_string(d.test_labels);
     }},
    {"test_fraction",
     [](const YamlReader& r, const YAML::Node& v, const std::string& p, nn::DataSpec& d) {
       d.test_fraction = r.real(v, p, {0, 1, false, true});
     },
     [](const nn::DataSpec& d) {
       return d.test_fraction == 0 ? std::string() : str(static_cast<float>(d.test_fraction));
     }},
    {"label_column",
     [](const YamlReader& r, const YAML::Node& v, const std::string& p, nn::DataSpec& d) {
       d.label_column = r.string(v, p);  // a name, or a 0-based index (digits only)
     },
     [](const nn::DataSpec& d) {
       return d.label_column.empty() ? "" : detail::yaml_string(d.label_column);
     }},
    {"header",
     [](const YamlReader& r, const YAML::Node& v, const std::string& p, nn::DataSpec& d) {
       d.header = r.choice(v, p, "header", kHeaders);
     },
     [](const nn::DataSpec& d) { return d.header == "auto" ? "" : d.header; }},
};

}  // namespace

namespace detail {

void read_data_section(const YamlReader& r, const YAML::Node& map, const std::string& path,
                       nn::DataSpec& d) {
  read_fields(r, map, path, kDataFields, d);
}

void write_data_section(std::string& out, const std::string& indent, const nn::DataSpec& d) {
  write_fields(out, indent, kDataFields, d);
}

YAML::Node find_node(const YAML::Node& root, std::initializer_list<const char*> keys) {
  YAML::Node n = root;
  for (const char* k : keys) {
    if (!n.IsMap()) break;
    const YAML::Node& map = n;
    YAML::Node child = map[k];
    if (!child.IsDefined()) break;
    n = child;
  }
  return n;
}

bool has_key(const YAML::Node& root, const char* key) {
  const YAML::Node& map = root;
  return root.IsMap() && map[key].IsDefined();
}

DataFacts resolve_data(const YamlReader& r, const YAML::Node& root, nn::DataSpec& d) {
  // Not find(): it assigns nodes, which rewrites the tree (fine only on the
  // way to an error).
  const YAML::Node& top = root;
  const YAML::Node section = has_key(root, "data") ? top["data"] : YAML::Node();
  auto given = [&](const char* key) { return section.IsMap() && has_key(section, key); };
  auto at = [&](const char* key) { return find_node(root, {"data", key}); };
  if (!d.path.empty() && given("dataset"))
    r.fail(at("dataset"), "data.dataset",
           "give either dataset (a name) or path (a file), not both");
  if (d.path.empty())
    for (const char* key :
         {"format", "labels", "test_path", "test_labels", "label_column", "header"})
      if (given(key))
        r.fail(at(key), std::string("data.") + key,
               "applies only to a data set given by path (add `path:`)");
  if (!d.test_path.empty() && d.test_fraction > 0)
    r.fail(at("test_fraction"), "data.test_fraction",
           "the test split comes from test_path; give test_fraction only without it");
  if (!d.test_labels.empty() && d.test_path.empty())
    r.fail(at("test_labels"), "data.test_labels", "test_labels needs test_path beside it");

  DataFacts facts;
  if (d.path.empty()) {
    const DatasetInfo& info = *find_dataset(d.dataset);
    const bool table = info.rank == 1 && d.dataset != "synthetic";
    if (!table && given("test_fraction"))
      r.fail(at("test_fraction"), "data.test_fraction",
             "'" + d.dataset + "' has its own test set; test_fraction applies to tables and files");
    if (table && !given("test_fraction")) d.test_fraction = kTableTestFraction;
    facts.sample = info.shape();
    facts.classes = info.classes;
    facts.train_samples = info.train_samples;
    if (d.test_fraction > 0)  // as data::load_files splits it
      facts.train_samples -= std::max<int64_t>(
          1, std::llround(d.test_fraction * static_cast<double>(info.train_samples)));
  } else {
    d.dataset = std::filesystem::path(d.path).filename().string();
    try {
      const data::SampleShape s = data::sample_shape(data::load_options(d, ""));
      facts.sample = s.sample;
      facts.classes = s.num_classes;
      facts.train_samples = s.train_samples;
    } catch (const DataError& e) {
      r.fail(at("path"), "data.path", e.what());
    }
  }
  // Small data sets hold out a fifth for validation unless told otherwise.
  if (!given("validation") && facts.train_samples < 25000) d.validation = facts.train_samples / 5;
  return facts;
}

}  // namespace detail

bool dataset_shape(const std::string& name, nn::Shape* sample, int64_t* classes) {
  const DatasetInfo* d = find_dataset(name);
  if (!d) return false;
  if (sample) *sample = d->shape();
  if (classes) *classes = d->classes;
  return true;
}

bool data_shape(const nn::DataSpec& data, nn::Shape* sample, int64_t* classes) {
  if (data.path.empty()) return dataset_shape(data.dataset, sample, classes);
  try {
    const data::SampleShape s = data::sample_shape(data::load_options(data, ""));
    if (sample) *sample = s.sample;
    if (classes) *classes = s.num_classes;
    return true;
  } catch (const DataError&) {
    return false;
  }
}

}  // namespace dnnlab::spec
