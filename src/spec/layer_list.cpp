// Reading and writing the `model.layers` list (see layer_list.hpp and
// docs/spec.md). Which layers exist, what argument each takes and which
// options it allows all come from the nn layer registry.
#include "spec/layer_list.hpp"

#include <algorithm>
#include <cmath>

#include "nn/registry.hpp"

namespace dnnlab::spec::detail {
namespace {

using nn::ArgKind;
using nn::LayerInfo;
using nn::LayerSpec;

// `activation: linear` adds no layer (useful when sweeping over activations).
constexpr std::string_view kNoActivation = "linear";

std::vector<std::string_view> layer_names() {
  std::vector<std::string_view> names;
  for (const LayerInfo& l : nn::layer_registry()) names.push_back(l.name);
  return names;
}

std::vector<std::string_view> activation_names() {
  std::vector<std::string_view> names;
  for (const LayerInfo& l : nn::layer_registry())
    if (nn::activation_from_name(l.name, nullptr)) names.push_back(l.name);
  names.push_back(kNoActivation);
  return names;
}

std::string index_path(const std::string& path, size_t i) {
  return path + "[" + std::to_string(i) + "]";
}

void set_arg(const LayerInfo& info, double v, LayerSpec& spec) {
  if (info.arg_field == "units") spec.units = static_cast<int64_t>(v);
  if (info.arg_field == "alpha") spec.alpha = static_cast<float>(v);
}

// A layer entry while it is read: the layer and the activation it asks for.
struct Entry {
  LayerSpec layer;
  std::string activation;
};

// The options a registry row may allow beside its name. A registry option
// missing here is a programmer error, reported like an unknown key.
constexpr Field<Entry> kOptions[] = {
    {"activation",
     [](const YamlReader& r, const YAML::Node& v, const std::string& path, Entry& e) {
       e.activation = r.choice(v, path, "activation", activation_names());
     }},
    {"init",
     [](const YamlReader& r, const YAML::Node& v, const std::string& path, Entry& e) {
       static constexpr std::string_view kInits[] = {"he", "glorot", "lecun"};
       e.layer.init = r.choice(v, path, "initializer", kInits);
     }},
    {"bias", [](const YamlReader& r, const YAML::Node& v, const std::string& path,
                Entry& e) { e.layer.bias = r.boolean(v, path); }},
};

class ListReader {
 public:
  explicit ListReader(const YamlReader& r) : r_(r) {}

  void read_list(const YAML::Node& list, const std::string& path, LayerList& out) const {
    if (!list.IsDefined() || list.IsNull()) r_.fail(list, path, "a model needs at least one layer");
    if (!list.IsSequence())
      r_.fail(list, path, "expected a list of layers, got " + describe_node(list));
    if (list.size() == 0)
      r_.fail(list, path, "a model needs at least one layer; the list is empty");
    for (size_t i = 0; i < list.size(); ++i) read_entry(list[i], index_path(path, i), out);
  }

 private:
  void read_entry(const YAML::Node& e, const std::string& path, LayerList& out) const {
    if (e.IsScalar()) {
      const LayerInfo& info = layer_info(e, path, e.Scalar());
      Entry entry{make_layer(info, e), {}};
      read_arg(info, YAML::Node(), e, path + "." + e.Scalar(), entry.layer);
      append(entry, path, out);
      return;
    }
    if (!e.IsMap())
      r_.fail(e, path, "expected a layer name or a map like `dense: 64`, got " + describe_node(e));

    const LayerInfo* info = nullptr;
    YAML::Node name_key, value, repeat, block;
    bool has_repeat = false, has_block = false;
    auto kv = r_.entries(e, path);
    for (const auto& [key, v] : kv) {
      const std::string& k = key.Scalar();
      if (const LayerInfo* l = nn::find_layer(k)) {
        if (info)
          r_.fail(key, join(path, k),
                  "two layer names ('" + std::string(info->name) + "' and '" + k +
                      "') in one entry; give each layer its own list item");
        info = l, name_key = key, value = v;
      } else if (k == "repeat") {
        repeat = v, has_repeat = true;
      } else if (k == "layers") {
        block = v, has_block = true;
      }
    }
    if (info && has_block)
      for (const auto& [key, v] : kv)
        if (key.Scalar() == "layers")
          r_.fail(key, join(path, "layers"),
                  "'layers' (a repeat block) cannot sit beside the layer '" +
                      std::string(info->name) + "'");

    LayerList body;
    if (info) {
      Entry entry{make_layer(*info, e), {}};
      read_arg(*info, value, name_key, join(path, info->name), entry.layer);
      std::vector<std::string_view> allowed{info->name, "repeat"};
      allowed.insert(allowed.end(), info->options.begin(), info->options.end());
      for (const auto& [key, v] : kv) {
        const std::string& k = key.Scalar();
        if (k == info->name || k == "repeat") continue;
        const Field<Entry>* option = nullptr;
        if (std::find(info->options.begin(), info->options.end(), k) != info->options.end())
          for (const Field<Entry>& f : kOptions)
            if (f.key == k) option = &f;
        if (!option) r_.fail(key, join(path, k), unknown_key_message(k, path, allowed));
        option->read(r_, v, join(path, k), entry);
      }
      append(entry, path, body);
    } else if (has_block) {
      for (const auto& [key, v] : kv) {
        const std::string& k = key.Scalar();
        static constexpr std::string_view kBlockKeys[] = {"repeat", "layers"};
        if (k != "repeat" && k != "layers")
          r_.fail(key, join(path, k), unknown_key_message(k, path, kBlockKeys));
      }
      read_list(block, join(path, "layers"), body);
    } else {
      for (const auto& [key, v] : kv)
        if (key.Scalar() != "repeat") layer_info(key, join(path, key.Scalar()), key.Scalar());
      r_.fail(e, path, "this entry has no layer name (like `dense: 64`) or `layers:` block");
    }

    int64_t n = 1;
    if (has_repeat) n = r_.integer(repeat, join(path, "repeat"), {1, double(kMaxRepeat)});
    if (out.layers.size() + body.layers.size() * static_cast<size_t>(n) > kMaxLayers)
      r_.fail(has_repeat ? repeat : e, join(path, "repeat"),
              "the model would have more than " + std::to_string(kMaxLayers) +
                  " layers once repeat blocks are expanded");
    for (int64_t i = 0; i < n; ++i) {
      out.layers.insert(out.layers.end(), body.layers.begin(), body.layers.end());
      out.paths.insert(out.paths.end(), body.paths.begin(), body.paths.end());
    }
  }

  const LayerInfo& layer_info(const YAML::Node& at, const std::string& path,
                              const std::string& name) const {
    const LayerInfo* info = nn::find_layer(name);
    if (!info) {
      std::vector<std::string_view> valid = layer_names();
      r_.fail(at, path, "unknown layer '" + name + "'; " + suggest(name, valid));
    }
    return *info;
  }

  LayerSpec make_layer(const LayerInfo& info, const YAML::Node& entry) const {
    LayerSpec s;
    s.type = std::string(info.name);
    s.where = r_.where(entry);
    return s;
  }

  // The value beside a layer's name: its argument, or its default when null.
  void read_arg(const LayerInfo& info, const YAML::Node& value, const YAML::Node& at,
                const std::string& path, LayerSpec& spec) const {
    if (!value.IsDefined() || value.IsNull()) {
      if (std::isnan(info.arg_default))
        r_.fail(at, path,
                "'" + std::string(info.name) + "' needs a value (its " +
                    std::string(info.arg_field) + "), e.g. `" + std::string(info.name) + ": 64`");
      set_arg(info, info.arg_default, spec);
      return;
    }
    Range range{info.arg_min, info.arg_max};
    switch (info.arg) {
      case ArgKind::kNone:
        r_.fail(value, path, "'" + std::string(info.name) + "' takes no value");
      case ArgKind::kInt:
        set_arg(info, static_cast<double>(r_.integer(value, path, range)), spec);
        break;
      case ArgKind::kFloat:
        set_arg(info, r_.real(value, path, range), spec);
        break;
    }
  }

  void append(const Entry& entry, const std::string& path, LayerList& out) const {
    out.layers.push_back(entry.layer);
    out.paths.push_back(path);
    if (entry.activation.empty() || entry.activation == kNoActivation) return;
    const LayerInfo* act = nn::find_layer(entry.activation);
    LayerSpec a;
    a.type = entry.activation;
    a.where = entry.layer.where;
    set_arg(*act, std::isnan(act->arg_default) ? 0.0 : act->arg_default, a);
    out.layers.push_back(a);
    out.paths.push_back(path + ".activation");
  }

  const YamlReader& r_;
};

// One layer as the lines of a YAML map item ("dense: 64", "init: lecun").
std::vector<std::string> layer_lines(const LayerSpec& l, bool in_map) {
  const LayerInfo* info = nn::find_layer(l.type);
  std::vector<std::string> lines;
  if (!info || info->arg == ArgKind::kNone)
    lines.push_back(in_map ? l.type + ": null" : l.type);
  else if (info->arg_field == "units")
    lines.push_back(l.type + ": " + std::to_string(l.units));
  else
    lines.push_back(l.type + ": " + yaml_float(l.alpha));
  if (!l.init.empty()) lines.push_back("init: " + l.init);
  if (!l.bias) lines.push_back("bias: false");
  if (lines.size() > 1 && (!info || info->arg == ArgKind::kNone)) lines[0] = l.type + ": null";
  return lines;
}

void write_item(std::string& out, const std::vector<std::string>& lines,
                const std::string& indent) {
  for (size_t i = 0; i < lines.size(); ++i) out += indent + (i ? "  " : "- ") + lines[i] + "\n";
}

}  // namespace

bool same_layer(const LayerSpec& a, const LayerSpec& b) {
  return a.type == b.type && a.units == b.units && a.alpha == b.alpha && a.init == b.init &&
         a.bias == b.bias;
}

LayerList read_layer_list(const YamlReader& r, const YAML::Node& list, const std::string& path) {
  LayerList out;
  ListReader(r).read_list(list, path, out);
  return out;
}

void write_layer_list(std::string& out, const std::vector<LayerSpec>& layers,
                      const std::string& indent) {
  constexpr size_t kMaxPeriod = 16;
  size_t i = 0;
  while (i < layers.size()) {
    // The period that covers the most layers from i on (the shortest on ties).
    size_t best_len = 1, best_reps = 1;
    for (size_t len = 1; len <= kMaxPeriod && i + 2 * len <= layers.size(); ++len) {
      size_t reps = 1;
      while (i + (reps + 1) * len <= layers.size() &&
             std::equal(layers.begin() + i, layers.begin() + i + len,
                        layers.begin() + i + reps * len, same_layer))
        ++reps;
      if (reps >= 2 && reps * len > best_reps * best_len) best_len = len, best_reps = reps;
    }
    if (best_reps == 1) {
      write_item(out, layer_lines(layers[i], false), indent);
    } else if (best_len == 1) {
      std::vector<std::string> lines = layer_lines(layers[i], true);
      lines.insert(lines.begin() + 1, "repeat: " + std::to_string(best_reps));
      write_item(out, lines, indent);
    } else {
      write_item(out, {"repeat: " + std::to_string(best_reps), "layers:"}, indent);
      std::vector<LayerSpec> body(layers.begin() + i, layers.begin() + i + best_len);
      write_layer_list(out, body, indent + "    ");
    }
    i += best_len * best_reps;
  }
}

}  // namespace dnnlab::spec::detail
