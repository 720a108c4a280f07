// The one table of layer types and their attributes.
#include "nn/registry.hpp"

#include <cmath>
#include <cstdio>
#include <limits>

#include "nn/conv_layers.hpp"
#include "nn/layers.hpp"

namespace dnnlab::nn {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kBig = 1e9;

constexpr std::string_view kInits[] = {"he", "glorot", "lecun"};
constexpr std::span<const std::string_view> kNoChoices{};

struct ActivationRow {
  std::string_view name;
  Act act;
};
constexpr ActivationRow kActivations[] = {
    {"relu", Act::kRelu}, {"leaky_relu", Act::kLeakyRelu}, {"elu", Act::kElu},
    {"tanh", Act::kTanh}, {"sigmoid", Act::kSigmoid},
};

// ---- attributes, one array per layer ---------------------------------------

constexpr AttrInfo kDenseAttrs[] = {
    {"units", AttrKind::kInt, kNaN, 1, kBig, "", kNoChoices, "output width"},
    {"init", AttrKind::kEnum, 0, 0, 0, "", kInits, "weight initializer; empty: the model's `init`"},
    {"bias", AttrKind::kBool, 1, 0, 1, "", kNoChoices, "add a learned bias"},
};
constexpr AttrInfo kLeakyAttrs[] = {
    {"alpha", AttrKind::kFloat, 0.01, 0, 1, "", kNoChoices, "slope for x < 0"},
};
constexpr AttrInfo kEluAttrs[] = {
    {"alpha", AttrKind::kFloat, 1, 0, kBig, "", kNoChoices, "saturation for x < 0"},
};
constexpr AttrInfo kDropoutAttrs[] = {
    {"rate", AttrKind::kFloat, 0.5, 0, 0.999, "", kNoChoices, "fraction of units zeroed"},
};
constexpr AttrInfo kBatchNormAttrs[] = {
    {"momentum", AttrKind::kFloat, 0.1, 0, 1, "", kNoChoices,
     "weight of a batch in the running statistics"},
    {"eps", AttrKind::kFloat, 1e-5, 1e-12, 1, "", kNoChoices, "added to the variance"},
};
constexpr AttrInfo kConvAttrs[] = {
    {"filters", AttrKind::kInt, kNaN, 1, 65536, "", kNoChoices, "output channels"},
    {"kernel", AttrKind::kInt, 3, 1, 64, "", kNoChoices, "square kernel size"},
    {"stride", AttrKind::kInt, 1, 1, 64, "", kNoChoices, "step between windows"},
    {"padding", AttrKind::kInt, 0, 0, 64, "", kNoChoices, "zeros added on each side"},
    {"bias", AttrKind::kBool, 1, 0, 1, "", kNoChoices, "add a learned bias per channel"},
    {"init", AttrKind::kEnum, 0, 0, 0, "", kInits,
     "weight initializer (fan-in C*kernel^2); empty: the model's `init`"},
};
constexpr AttrInfo kPoolAttrs[] = {
    {"kernel", AttrKind::kInt, 2, 1, 64, "", kNoChoices, "square window size"},
    {"stride", AttrKind::kInt, 0, 0, 64, "", kNoChoices, "step between windows; 0: the kernel"},
    {"padding", AttrKind::kInt, 0, 0, 32, "", kNoChoices,
     "padding on each side, at most kernel / 2"},
};
constexpr std::span<const AttrInfo> kNoAttrs{};

// ---- factories -------------------------------------------------------------

template <Act A, const char* Name>
std::unique_ptr<Layer> make_activation(const LayerSpec& s) {
  return std::make_unique<Activation>(Name, A, static_cast<float>(s.attrs.get("alpha")));
}
constexpr char kRelu[] = "relu", kLeaky[] = "leaky_relu", kElu[] = "elu", kTanh[] = "tanh",
               kSigmoid[] = "sigmoid";

std::unique_ptr<Layer> make_dense(const LayerSpec& s) {
  return std::make_unique<Dense>(static_cast<int64_t>(s.attrs.get("units")), s.attrs.str("init"),
                                 s.attrs.get("bias", 1) != 0);
}
std::unique_ptr<Layer> make_softmax(const LayerSpec&) {
  return std::make_unique<Softmax>();
}
std::unique_ptr<Layer> make_dropout(const LayerSpec& s) {
  return std::make_unique<Dropout>(static_cast<float>(s.attrs.get("rate")));
}
std::unique_ptr<Layer> make_flatten(const LayerSpec&) {
  return std::make_unique<Flatten>();
}
std::unique_ptr<Layer> make_batchnorm(const LayerSpec& s) {
  return std::make_unique<BatchNorm>(static_cast<float>(s.attrs.get("momentum", 0.1)),
                                     static_cast<float>(s.attrs.get("eps", 1e-5)));
}
std::unique_ptr<Layer> make_conv2d(const LayerSpec& s) {
  Conv2DConfig c;
  c.filters = static_cast<int64_t>(s.attrs.get("filters"));
  c.kernel_h = c.kernel_w = static_cast<int>(s.attrs.get("kernel", 3));
  c.stride_h = c.stride_w = static_cast<int>(s.attrs.get("stride", 1));
  c.pad_h = c.pad_w = static_cast<int>(s.attrs.get("padding", 0));
  c.bias = s.attrs.get("bias", 1) != 0;
  c.init = s.attrs.str("init");
  return std::make_unique<Conv2D>(c);
}
template <Pool P>
std::unique_ptr<Layer> make_pool2d(const LayerSpec& s) {
  Pool2DConfig c;
  c.kernel_h = c.kernel_w = static_cast<int>(s.attrs.get("kernel", 2));
  c.stride_h = c.stride_w = static_cast<int>(s.attrs.get("stride", 0));
  c.pad_h = c.pad_w = static_cast<int>(s.attrs.get("padding", 0));
  return std::make_unique<Pool2D>(P, c);
}
std::unique_ptr<Layer> make_global_avg_pool(const LayerSpec&) {
  return std::make_unique<GlobalAvgPool>();
}
std::unique_ptr<Layer> make_add(const LayerSpec&) {
  return std::make_unique<Add>();
}
std::unique_ptr<Layer> make_concat(const LayerSpec&) {
  return std::make_unique<Concat>();
}

const LayerInfo kLayers[] = {
    {"dense", "units", kDenseAttrs, 1, make_dense,
     "fully connected: y = x W + b; flattens its input"},
    {"relu", "", kNoAttrs, 1, make_activation<Act::kRelu, kRelu>, "max(x, 0)"},
    {"leaky_relu", "alpha", kLeakyAttrs, 1, make_activation<Act::kLeakyRelu, kLeaky>,
     "x if x > 0 else alpha x"},
    {"elu", "alpha", kEluAttrs, 1, make_activation<Act::kElu, kElu>,
     "x if x > 0 else alpha (e^x - 1)"},
    {"tanh", "", kNoAttrs, 1, make_activation<Act::kTanh, kTanh>, "hyperbolic tangent"},
    {"sigmoid", "", kNoAttrs, 1, make_activation<Act::kSigmoid, kSigmoid>, "1 / (1 + e^-x)"},
    {"softmax", "", kNoAttrs, 1, make_softmax, "normalized exponentials over the last dimension"},
    {"dropout", "rate", kDropoutAttrs, 1, make_dropout,
     "zeroes a fraction `rate` of units while training"},
    {"flatten", "", kNoAttrs, 1, make_flatten, "[C, H, W] -> [C*H*W]"},
    {"batchnorm", "", kBatchNormAttrs, 1, make_batchnorm,
     "normalizes each feature ([F]) or channel ([C, H, W]) over the batch; running "
     "statistics at evaluation"},
    {"conv2d", "filters", kConvAttrs, 1, make_conv2d,
     "2D convolution over [C, H, W] (or [H, W]) -> [filters, H', W']"},
    {"max_pool2d", "kernel", kPoolAttrs, 1, make_pool2d<Pool::kMax>,
     "the largest value of each window, per channel"},
    {"avg_pool2d", "kernel", kPoolAttrs, 1, make_pool2d<Pool::kAvg>,
     "the mean of each window (padding counted), per channel"},
    {"global_avg_pool", "", kNoAttrs, 1, make_global_avg_pool,
     "the mean of each channel's plane: [C, H, W] -> [C]"},
    {"add", "", kNoAttrs, kManyInputs, make_add, "elementwise sum of its inputs (same shapes)"},
    {"concat", "", kNoAttrs, kManyInputs, make_concat,
     "joins its inputs along the first sample dimension (features or channels)"},
};

std::string num_text(const AttrInfo& a, double v) {
  if (a.kind == AttrKind::kBool) return v != 0 ? "true" : "false";
  if (a.kind == AttrKind::kInt) return std::to_string(static_cast<int64_t>(v));
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

}  // namespace

std::span<const LayerInfo> layer_registry() {
  return kLayers;
}

const LayerInfo* find_layer(std::string_view name) {
  for (const LayerInfo& l : kLayers)
    if (l.name == name) return &l;
  return nullptr;
}

const AttrInfo* find_attr(const LayerInfo& layer, std::string_view name) {
  for (const AttrInfo& a : layer.attrs)
    if (a.name == name) return &a;
  return nullptr;
}

std::string check_attr(const AttrInfo& a, double v) {
  if (a.kind == AttrKind::kEnum) return "expected one of the names listed";
  if (!std::isfinite(v)) return "must be a finite number";
  if (a.kind == AttrKind::kBool) return v == 0 || v == 1 ? "" : "expected true or false";
  if (a.kind == AttrKind::kInt && v != std::floor(v)) return "expected an integer";
  if (v < a.min || v > a.max)
    return "must be in [" + num_text(a, a.min) + ", " + num_text(a, a.max) + "], got " +
           num_text(a, v);
  return "";
}

std::string check_attr(const AttrInfo& a, std::string_view v) {
  if (a.kind != AttrKind::kEnum) return "expected a number";
  if (v == a.def_text) return "";
  std::string list;
  for (std::string_view c : a.choices) {
    if (c == v) return "";
    list += (list.empty() ? "" : ", ") + std::string(c);
  }
  return "expected one of: " + list;
}

std::string fill_defaults(const LayerInfo& layer, LayerSpec& spec) {
  for (const AttrInfo& a : layer.attrs) {
    const std::string key(a.name);
    if (a.kind == AttrKind::kEnum) {
      if (!spec.attrs.text.count(key)) spec.attrs.text[key] = std::string(a.def_text);
    } else if (!spec.attrs.num.count(key)) {
      if (std::isnan(a.def)) return key;
      spec.attrs.num[key] = a.def;
    }
  }
  return "";
}

bool is_default(const AttrInfo& a, const LayerSpec& spec) {
  if (a.kind == AttrKind::kEnum) return spec.attrs.str(a.name) == a.def_text;
  return !std::isnan(a.def) && spec.attrs.get(a.name, a.def) == a.def;
}

std::string attr_text(const AttrInfo& a, const LayerSpec& spec) {
  if (a.kind == AttrKind::kEnum) return spec.attrs.str(a.name);
  return num_text(a, spec.attrs.get(a.name, a.def));
}

std::string layer_table_markdown() {
  static const char* const kKind[] = {"int", "float", "bool", "enum"};
  std::string t = "| layer | inputs | attribute | type | default | range | meaning |\n";
  t += "|---|---|---|---|---|---|---|\n";
  for (const LayerInfo& l : kLayers) {
    const std::string head =
        "| `" + std::string(l.name) + "` | " + (l.inputs == kManyInputs ? "2+" : "1") + " | ";
    if (l.attrs.empty()) {
      t += head + "| | | | " + std::string(l.summary) + " |\n";
      continue;
    }
    bool first = true;
    for (const AttrInfo& a : l.attrs) {
      std::string def, range;
      if (a.kind == AttrKind::kEnum) {
        def = a.def_text.empty() ? "(model's)" : std::string(a.def_text);
        for (std::string_view c : a.choices) range += (range.empty() ? "" : ", ") + std::string(c);
      } else {
        def = std::isnan(a.def) ? "required" : num_text(a, a.def);
        if (a.kind != AttrKind::kBool) range = num_text(a, a.min) + " .. " + num_text(a, a.max);
      }
      std::string name = std::string(a.name) + (a.name == l.primary ? " (value)" : "");
      t += (first ? head : "| | | ") + name + " | " + kKind[static_cast<int>(a.kind)] + " | " +
           def + " | " + range + " | " + std::string(a.doc) +
           (first ? ". " + std::string(l.summary) : std::string()) + " |\n";
      first = false;
    }
  }
  return t;
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
  for (std::string_view i : kInits)
    if (i == name) return true;
  return false;
}

}  // namespace dnnlab::nn
