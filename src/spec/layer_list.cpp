// Reading and writing the `model.layers` list (see layer_list.hpp and
// docs/spec.md). Which layers exist and which attributes each takes (type,
// default, range) all come from the nn layer registry.
#include "spec/layer_list.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "nn/model.hpp"
#include "nn/registry.hpp"

namespace dnnlab::spec::detail {
namespace {

using nn::AttrKind;
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

// A layer entry while it is read: the layer and the activation it asks for.
struct Entry {
  LayerSpec layer;
  std::string activation;
};

// Keys of a layer entry that are not attributes of the layer.
constexpr std::string_view kEntryKeys[] = {"activation", "name", "inputs", "repeat"};

// Reads one attribute value against its registry row: YAML decides only the
// value's type (an integer, a number, a boolean, a name); whether it is valid
// is nn::check_attr's verdict, the one the JSON codecs ask too.
void read_attr(const YamlReader& r, const nn::AttrInfo& a, const YAML::Node& v,
               const std::string& path, LayerSpec& spec) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  const std::string key(a.name);
  std::string problem;
  switch (a.kind) {
    case AttrKind::kInt:
    case AttrKind::kFloat: {
      const double x = a.kind == AttrKind::kInt
                           ? static_cast<double>(r.integer(v, path, {-kInf, kInf}))
                           : static_cast<double>(r.real(v, path, {-kInf, kInf}));
      problem = nn::check_attr(a, x);
      spec.attrs.num[key] = x;
      break;
    }
    case AttrKind::kBool:
      spec.attrs.num[key] = r.boolean(v, path) ? 1 : 0;
      break;
    case AttrKind::kEnum:
      // The default text ("": the model's init) is valid written out too.
      if (v.IsScalar() && v.Scalar() == a.def_text && nn::check_attr(a, v.Scalar()).empty())
        spec.attrs.text[key] = v.Scalar();
      else
        spec.attrs.text[key] = r.choice(v, path, a.name, a.choices);
      break;
  }
  if (!problem.empty()) r.fail(v, path, problem);
}

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
      read_value(info, YAML::Node(), e, path + "." + e.Scalar(), entry.layer);
      append(entry, path, out);
      return;
    }
    if (!e.IsMap())
      r_.fail(e, path, "expected a layer name or a map like `dense: 64`, got " + describe_node(e));

    const LayerInfo* info = nullptr;
    YAML::Node name_key, value, repeat, block, block_key, projection;
    bool has_repeat = false, has_block = false, residual = false, has_projection = false;
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
      } else if (k == "layers" || k == "residual") {
        if (has_block)
          r_.fail(key, join(path, k), "one entry holds either `layers:` or `residual:`, not both");
        block = v, block_key = key, has_block = true, residual = k == "residual";
      } else if (k == "projection") {
        projection = v, has_projection = true;
      }
    }
    if (info && has_block)
      r_.fail(block_key, join(path, block_key.Scalar()),
              "'" + block_key.Scalar() + "' (a block) cannot sit beside the layer '" +
                  std::string(info->name) + "'");

    LayerList body;
    if (info) {
      Entry entry{make_layer(*info, e), {}};
      read_value(*info, value, name_key, join(path, info->name), entry.layer);
      std::vector<std::string_view> allowed{info->name};
      allowed.insert(allowed.end(), std::begin(kEntryKeys), std::end(kEntryKeys));
      for (const nn::AttrInfo& a : info->attrs)
        if (a.name != info->primary) allowed.push_back(a.name);
      for (const auto& [key, v] : kv) {
        const std::string& k = key.Scalar();
        const std::string p = join(path, k);
        if (k == info->name || k == "repeat") continue;
        if (k == "activation") {
          entry.activation = r_.choice(v, p, "activation", activation_names());
        } else if (k == "name") {
          entry.layer.name = r_.string(v, p);
          if (const std::string problem = nn::layer_name_problem(entry.layer.name);
              !problem.empty())
            r_.fail(v, p, problem);
        } else if (k == "inputs") {
          read_inputs(*info, v, p, entry.layer);
        } else if (const nn::AttrInfo* a = nn::find_attr(*info, k); a && k != info->primary) {
          read_attr(r_, *a, v, p, entry.layer);
        } else {
          r_.fail(key, p, unknown_key_message(k, path, allowed));
        }
      }
      fill(*info, entry.layer, name_key, join(path, info->name));
      append(entry, path, body);
    } else if (has_block) {
      for (const auto& [key, v] : kv) {
        const std::string& k = key.Scalar();
        static constexpr std::string_view kBlockKeys[] = {"repeat", "layers", "residual",
                                                          "projection"};
        if (k != "repeat" && k != block_key.Scalar() && !(residual && k == "projection"))
          r_.fail(key, join(path, k), unknown_key_message(k, path, kBlockKeys));
      }
      read_list(block, join(path, block_key.Scalar()), body);
      if (residual) make_residual(body, path, has_projection ? &projection : nullptr, e);
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

  // A residual block: y = body(x) + x, or + a dense projection of x when
  // the widths differ. The skip reads the node before the block by relative
  // reference ("@-N": N nodes back), so the block repeats like any other.
  void make_residual(LayerList& body, const std::string& path, const YAML::Node* projection,
                     const YAML::Node& at) const {
    for (const LayerSpec& l : body.layers)
      for (const std::string& in : l.inputs)
        if (in.empty() || in[0] != '@')
          r_.fail(at, join(path, "residual"),
                  "layers inside a residual block cannot name inputs ('" + in + "')");
    const int m = static_cast<int>(body.layers.size());
    LayerSpec add;
    add.type = "add";
    add.where = r_.where(at);
    if (projection) {
      LayerSpec proj;
      proj.type = "dense";
      proj.where = r_.where(*projection);
      proj.attrs.num["units"] =
          static_cast<double>(r_.integer(*projection, join(path, "projection"), {1, 1e9}));
      proj.attrs.num["bias"] = 0;
      proj.attrs.text["init"] = "";
      proj.inputs = {"@-" + std::to_string(m + 1)};
      body.layers.push_back(proj);
      body.paths.push_back(join(path, "projection"));
      add.inputs = {"@-2", "@-1"};
    } else {
      add.inputs = {"@-1", "@-" + std::to_string(m + 1)};
    }
    body.layers.push_back(add);
    body.paths.push_back(join(path, "residual"));
  }

  void read_inputs(const LayerInfo& info, const YAML::Node& v, const std::string& path,
                   LayerSpec& spec) const {
    auto one = [&](const YAML::Node& n, const std::string& p) {
      std::string in = r_.string(n, p);
      if (in[0] == '@' && nn::relative_input(in) < 1)
        r_.fail(n, p,
                "'" + in +
                    "' is not a relative input: write \"@-N\" for the layer N places "
                    "back (N a whole number >= 1)");
      spec.inputs.push_back(std::move(in));
    };
    if (v.IsScalar()) {
      one(v, path);
    } else if (v.IsSequence() && v.size() > 0) {
      for (size_t i = 0; i < v.size(); ++i) one(v[i], index_path(path, i));
    } else {
      r_.fail(v, path, "expected a layer name or a list of them, got " + describe_node(v));
    }
    const bool many = info.inputs == nn::kManyInputs;
    if (many ? spec.inputs.size() < 2 : spec.inputs.size() != 1)
      r_.fail(v, path,
              "'" + std::string(info.name) + "' takes " +
                  (many ? "two or more inputs" : "one input") + ", got " +
                  std::to_string(spec.inputs.size()));
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

  // The value beside a layer's name: its primary attribute (null: default).
  void read_value(const LayerInfo& info, const YAML::Node& value, const YAML::Node& at,
                  const std::string& path, LayerSpec& spec) const {
    if (!value.IsDefined() || value.IsNull()) {
      if (!info.primary.empty()) fill(info, spec, at, path);
      return;
    }
    const nn::AttrInfo* a = info.primary.empty() ? nullptr : nn::find_attr(info, info.primary);
    if (!a) r_.fail(value, path, "'" + std::string(info.name) + "' takes no value");
    read_attr(r_, *a, value, path, spec);
  }

  void fill(const LayerInfo& info, LayerSpec& spec, const YAML::Node& at,
            const std::string& path) const {
    const std::string missing = nn::fill_defaults(info, spec);
    if (missing.empty()) return;
    r_.fail(at, path,
            "'" + std::string(info.name) + "' needs a value (its " + missing + "), e.g. `" +
                std::string(info.name) + ": 64`");
  }

  void append(const Entry& entry, const std::string& path, LayerList& out) const {
    out.layers.push_back(entry.layer);
    out.paths.push_back(path);
    if (entry.activation.empty() || entry.activation == kNoActivation) return;
    LayerSpec a;
    a.type = entry.activation;
    a.where = entry.layer.where;
    nn::fill_defaults(*nn::find_layer(entry.activation), a);
    out.layers.push_back(a);
    out.paths.push_back(path + ".activation");
  }

  const YamlReader& r_;
};

// An attribute's value as YAML: floats in their shortest exact form, names
// quoted where YAML would misread them.
std::string attr_yaml(const nn::AttrInfo& a, const LayerSpec& l) {
  if (a.kind == AttrKind::kFloat) return yaml_float(static_cast<float>(l.attrs.get(a.name, a.def)));
  if (a.kind == AttrKind::kEnum) return yaml_string(nn::attr_text(a, l));
  return nn::attr_text(a, l);
}

// One layer as the lines of a YAML map item ("dense: 64", "init: lecun").
std::vector<std::string> layer_lines(const LayerSpec& l, bool in_map) {
  const LayerInfo* info = nn::find_layer(l.type);
  std::vector<std::string> lines;
  const nn::AttrInfo* primary =
      info && !info->primary.empty() ? nn::find_attr(*info, info->primary) : nullptr;
  if (primary)
    lines.push_back(l.type + ": " + attr_yaml(*primary, l));
  else
    lines.push_back(in_map ? l.type + ": null" : l.type);
  if (info)
    for (const nn::AttrInfo& a : info->attrs)
      if (&a != primary && !nn::is_default(a, l))
        lines.push_back(std::string(a.name) + ": " + attr_yaml(a, l));
  if (!l.name.empty()) lines.push_back("name: " + yaml_string(l.name));
  if (!l.inputs.empty()) {
    std::string s = "inputs: [";
    for (size_t i = 0; i < l.inputs.size(); ++i) s += (i ? ", " : "") + yaml_string(l.inputs[i]);
    lines.push_back(s + "]");
  }
  if (lines.size() > 1 && !primary) lines[0] = l.type + ": null";
  return lines;
}

void write_item(std::string& out, const std::vector<std::string>& lines,
                const std::string& indent) {
  for (size_t i = 0; i < lines.size(); ++i) out += indent + (i ? "  " : "- ") + lines[i] + "\n";
}

}  // namespace

bool same_layer(const LayerSpec& a, const LayerSpec& b) {
  return a.type == b.type && a.attrs == b.attrs && a.name == b.name && a.inputs == b.inputs;
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
