// The one table of layer types and their attributes.
#include "nn/registry.hpp"

#include <cmath>
#include <cstdio>
#include <iterator>
#include <limits>

#include "nn/conv_layers.hpp"
#include "nn/layers.hpp"

namespace dnnlab::nn {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kBig = 1e9;

// ---- initializers and losses -------------------------------------------------

constexpr std::string_view kInits[] = {"he", "glorot", "lecun"};
constexpr NameInfo kInitializers[] = {
    {"he", "normal with variance 2 / fan-in (the default)"},
    {"glorot", "uniform in ±sqrt(6 / (fan-in + fan-out))"},
    {"lecun", "normal with variance 1 / fan-in"},
};
static_assert(std::size(kInitializers) == 3,
              "a new initializer needs its weights in layers.cpp "
              "and conv_layers.cpp, and a line in docs/spec.md");

constexpr std::string_view kLossNames[] = {"softmax_cross_entropy", "mse"};
constexpr NameInfo kLosses[] = {
    {"softmax_cross_entropy", "softmax and cross-entropy over the classes, fused"},
    {"mse", "mean squared error against the one-hot labels"},
};
static_assert(std::size(kLosses) == 2, "a new loss needs its LossKind and compute_loss case");

// A name list and its rows name the same things in the same order.
template <size_t N>
constexpr bool same_names(const std::string_view (&names)[N], const NameInfo (&rows)[N]) {
  for (size_t i = 0; i < N; ++i)
    if (names[i] != rows[i].name) return false;
  return true;
}
static_assert(same_names(kInits, kInitializers));
static_assert(same_names(kLossNames, kLosses));
constexpr std::span<const std::string_view> kNoChoices{};

struct ActivationRow {
  std::string_view name;
  Act act;
};
constexpr ActivationRow kActivations[] = {
    {"relu", Act::kRelu}, {"leaky_relu", Act::kLeakyRelu}, {"elu", Act::kElu},
    {"tanh", Act::kTanh}, {"sigmoid", Act::kSigmoid},
};
static_assert(std::size(kActivations) == 5,
              "a new activation needs its Act, its kernels and a layer row below");

// ---- attributes, one array per layer ---------------------------------------

constexpr AttrInfo kDenseAttrs[] = {
    {"units", AttrKind::kInt, kNaN, 1, kBig, "", kNoChoices, "output width"},
    {"init", AttrKind::kEnum, 0, 0, 0, "", kInits, "weight initializer; empty: the model's `init`"},
    {"bias", AttrKind::kBool, 1, 0, 1, "", kNoChoices, "add a learned bias"},
};
static_assert(std::size(kDenseAttrs) == 3, "a new dense attribute needs its read in make_dense");
constexpr AttrInfo kLeakyAttrs[] = {
    {"alpha", AttrKind::kFloat, 0.01, 0, 1, "", kNoChoices, "slope for x < 0"},
};
static_assert(std::size(kLeakyAttrs) == 1,
              "a new leaky_relu attribute needs its read in make_activation");
constexpr AttrInfo kEluAttrs[] = {
    {"alpha", AttrKind::kFloat, 1, 0, kBig, "", kNoChoices, "saturation for x < 0"},
};
static_assert(std::size(kEluAttrs) == 1, "a new elu attribute needs its read in make_activation");
constexpr AttrInfo kDropoutAttrs[] = {
    {"rate", AttrKind::kFloat, 0.5, 0, 0.999, "", kNoChoices, "fraction of units zeroed"},
};
static_assert(std::size(kDropoutAttrs) == 1,
              "a new dropout attribute needs its read in make_dropout");
constexpr AttrInfo kBatchNormAttrs[] = {
    {"momentum", AttrKind::kFloat, 0.1, 0, 1, "", kNoChoices,
     "weight of a batch in the running statistics"},
    {"eps", AttrKind::kFloat, 1e-5, 1e-12, 1, "", kNoChoices, "added to the variance"},
};
static_assert(std::size(kBatchNormAttrs) == 2,
              "a new batchnorm attribute needs its read in make_batchnorm");
constexpr AttrInfo kConvAttrs[] = {
    {"filters", AttrKind::kInt, kNaN, 1, 65536, "", kNoChoices, "output channels"},
    {"kernel", AttrKind::kInt, 3, 1, 64, "", kNoChoices, "square kernel size"},
    {"stride", AttrKind::kInt, 1, 1, 64, "", kNoChoices, "step between windows"},
    {"padding", AttrKind::kInt, 0, 0, 64, "", kNoChoices, "zeros added on each side"},
    {"bias", AttrKind::kBool, 1, 0, 1, "", kNoChoices, "add a learned bias per channel"},
    {"init", AttrKind::kEnum, 0, 0, 0, "", kInits,
     "weight initializer (fan-in C*kernel^2); empty: the model's `init`"},
};
static_assert(std::size(kConvAttrs) == 6, "a new conv2d attribute needs its read in make_conv2d");
constexpr AttrInfo kPoolAttrs[] = {
    {"kernel", AttrKind::kInt, 2, 1, 64, "", kNoChoices, "square window size"},
    {"stride", AttrKind::kInt, 0, 0, 64, "", kNoChoices, "step between windows; 0: the kernel"},
    {"padding", AttrKind::kInt, 0, 0, 32, "", kNoChoices,
     "padding on each side, at most kernel / 2"},
};
static_assert(std::size(kPoolAttrs) == 3, "a new pooling attribute needs its read in make_pool2d");
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

static_assert(std::size(kLayers) == 16,
              "a new layer needs a gradient-check case and a line in docs/spec.md");

// ---- optimizers and schedules ------------------------------------------------
//
// One range per attribute, what training tolerates (the codecs once differed;
// docs/spec.md says why each bound is where it is):
//  - eps in (0, 1]: 0 divides 0 by 0 for a weight whose gradient is still
//    zero; above 1 it only scales the rate down (write a smaller lr).
//  - beta1, beta2 and momentum in [0, 1): at 1 Adam's bias correction
//    1 - beta^t divides by zero, and momentum never forgets.
//  - gamma in (0, 1]: 0 stops training after one step, above 1 the rate grows
//    without bound.
//  - rates, decays and floors at most 1e9 (a float holds it exactly; beyond
//    it every step overflows).

constexpr double kFloatBig = 1e9;

constexpr std::string_view kOptimizerNames[] = {"sgd", "adam", "adamw", "adagrad", "rmsprop"};
constexpr NameInfo kOptimizers[] = {
    {"sgd", "stochastic gradient descent, with optional momentum and Nesterov's look-ahead"},
    {"adam", "Adam, weight decay added to the gradient"},
    {"adamw", "Adam with decoupled weight decay"},
    {"adagrad", "AdaGrad (torch.optim.Adagrad's rule)"},
    {"rmsprop", "RMSprop (torch.optim.RMSprop's rule)"},
};
static_assert(std::size(kOptimizers) == 5, "a new optimizer needs its step in optim.cpp");
static_assert(same_names(kOptimizerNames, kOptimizers));

using OptAttr = SectionAttr<OptimizerSpec>;
#define DNNLAB_FIELD(Spec, f)                             \
  [](const Spec& s) { return static_cast<double>(s.f); }, \
      [](Spec& s, double v) { s.f = static_cast<decltype(s.f)>(v); }
#define DNNLAB_BOOL_FIELD(Spec, f) \
  [](const Spec& s) { return s.f ? 1.0 : 0.0; }, [](Spec& s, double v) { s.f = v != 0; }

constexpr OptAttr kOptimizerAttrs[] = {
    {{"lr", AttrKind::kFloat, 0.01, 0, kFloatBig, "", kNoChoices, "the learning rate", true},
     "",
     DNNLAB_FIELD(OptimizerSpec, lr)},
    {{"momentum", AttrKind::kFloat, 0, 0, 1, "", kNoChoices, "velocity kept from the step before",
      false, true},
     "sgd, rmsprop",
     DNNLAB_FIELD(OptimizerSpec, momentum)},
    {{"nesterov", AttrKind::kBool, 0, 0, 1, "", kNoChoices, "Nesterov's look-ahead momentum"},
     "sgd",
     DNNLAB_BOOL_FIELD(OptimizerSpec, nesterov)},
    {{"weight_decay", AttrKind::kFloat, 0, 0, kFloatBig, "", kNoChoices,
      "added to the gradient times the weight (adamw: decoupled)"},
     "",
     DNNLAB_FIELD(OptimizerSpec, weight_decay)},
    {{"beta1", AttrKind::kFloat, 0.9, 0, 1, "", kNoChoices, "decay of the gradient's mean", false,
      true},
     "adam, adamw",
     DNNLAB_FIELD(OptimizerSpec, beta1)},
    {{"beta2", AttrKind::kFloat, 0.999, 0, 1, "", kNoChoices,
      "decay of the squared gradient's mean", false, true},
     "adam, adamw",
     DNNLAB_FIELD(OptimizerSpec, beta2)},
    {{"eps", AttrKind::kFloat, 1e-8, 0, 1, "", kNoChoices,
      "added after the square root (PyTorch's Adagrad default is `1e-10`: write it to match)",
      true},
     "adam, adamw, adagrad, rmsprop",
     DNNLAB_FIELD(OptimizerSpec, eps)},
    {{"alpha", AttrKind::kFloat, 0.99, 0, 1, "", kNoChoices, "smoothing of the squared gradients"},
     "rmsprop",
     DNNLAB_FIELD(OptimizerSpec, alpha)},
    {{"centered", AttrKind::kBool, 0, 0, 1, "", kNoChoices,
      "divide by the gradient's estimated variance"},
     "rmsprop",
     DNNLAB_BOOL_FIELD(OptimizerSpec, centered)},
    {{"lr_decay", AttrKind::kFloat, 0, 0, kFloatBig, "", kNoChoices,
      "step t uses lr / (1 + (t − 1) lr_decay)"},
     "adagrad",
     DNNLAB_FIELD(OptimizerSpec, lr_decay)},
    {{"initial_accumulator", AttrKind::kFloat, 0, 0, kFloatBig, "", kNoChoices,
      "the sum of squared gradients starts here"},
     "adagrad",
     DNNLAB_FIELD(OptimizerSpec, initial_accumulator)},
};
static_assert(std::size(kOptimizerAttrs) == 11, "a new OptimizerSpec field needs a row here");

constexpr std::string_view kScheduleNames[] = {"constant", "step", "cosine"};
constexpr NameInfo kSchedules[] = {
    {"constant", "the optimizer's rate throughout"},
    {"step", "the rate times `gamma` every `step_epochs` epochs"},
    {"cosine", "half a cosine from the rate down to `min_lr` over the epochs after the warm-up"},
};
static_assert(std::size(kSchedules) == 3, "a new schedule needs its case in scheduled_lr");
static_assert(same_names(kScheduleNames, kSchedules));

using SchedAttr = SectionAttr<ScheduleSpec>;
constexpr SchedAttr kScheduleAttrs[] = {
    {{"step_epochs", AttrKind::kInt, 1, 1, 1e6, "", kNoChoices,
      "multiply the rate by `gamma` every N epochs"},
     "step",
     DNNLAB_FIELD(ScheduleSpec, step_epochs)},
    {{"gamma", AttrKind::kFloat, 0.1, 0, 1, "", kNoChoices, "the factor", true},
     "step",
     DNNLAB_FIELD(ScheduleSpec, gamma)},
    {{"min_lr", AttrKind::kFloat, 0, 0, kFloatBig, "", kNoChoices,
      "the floor of the cosine; at most `optimizer.lr`"},
     "cosine",
     DNNLAB_FIELD(ScheduleSpec, min_lr)},
    {{"warmup_epochs", AttrKind::kInt, 0, 0, 1e6, "", kNoChoices,
      "linear warm-up before the schedule"},
     "",
     DNNLAB_FIELD(ScheduleSpec, warmup_epochs)},
};
static_assert(std::size(kScheduleAttrs) == 4, "a new ScheduleSpec field needs a row here");
#undef DNNLAB_FIELD
#undef DNNLAB_BOOL_FIELD

constexpr SectionInfo<OptimizerSpec> kOptimizerSection{"optimizer", kOptimizers, kOptimizerNames,
                                                       kOptimizerAttrs};
constexpr SectionInfo<ScheduleSpec> kScheduleSection{"schedule", kSchedules, kScheduleNames,
                                                     kScheduleAttrs};

std::string num_text(const AttrInfo& a, double v) {
  if (a.kind == AttrKind::kBool) return v != 0 ? "true" : "false";
  if (a.kind == AttrKind::kInt && std::fabs(v) < 9e18)
    return std::to_string(static_cast<int64_t>(v));
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

// "[0, 1)": an attribute's range as an interval.
std::string range_text(const AttrInfo& a) {
  std::string t(a.min_open ? "(" : "[");
  t += num_text(a, a.min);
  t += ", ";
  t += num_text(a, a.max);
  t += a.max_open ? ")" : "]";
  return t;
}

// A bound as the float nearest to it, as a float attribute's value is kept.
double as_float(double b) {
  return std::fabs(b) <= std::numeric_limits<float>::max() ? static_cast<float>(b) : b;
}

template <class Spec>
std::string section_table(const SectionInfo<Spec>& sec) {
  std::string t = "| key | default | applies to | valid |\n|---|---|---|---|\n";
  std::string types;
  for (const NameInfo& n : sec.types)
    types += (types.empty() ? "`" : "; `") + std::string(n.name) + "`: " + std::string(n.summary);
  t += "| `type` | `" + std::string(sec.types[0].name) + "` | | " + types + " |\n";
  for (const SectionAttr<Spec>& f : sec.attrs) {
    const AttrInfo& a = f.info;
    const std::string valid = a.kind == AttrKind::kBool ? "`true`, `false`" : range_text(a);
    t += "| `" + std::string(a.name) + "` | `" + num_text(a, a.def) + "` | " +
         (f.types.empty() ? std::string("all") : std::string(f.types)) + " | " + valid + ": " +
         std::string(a.doc) + " |\n";
  }
  return t;
}

// docs/spec.md's table of names (initializers, losses); the first is the default.
std::string names_table(std::span<const NameInfo> rows) {
  std::string t = "| name | meaning |\n|---|---|\n";
  for (const NameInfo& n : rows)
    t += "| `" + std::string(n.name) + "` | " + std::string(n.summary) + " |\n";
  return t;
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
  bool in = false;
  if (a.kind == AttrKind::kInt) {
    if (v != std::floor(v)) return "expected an integer";
    in = (a.min_open ? v > a.min : v >= a.min) && (a.max_open ? v < a.max : v <= a.max);
  } else if (std::fabs(v) <= std::numeric_limits<float>::max()) {
    // As used: the float nearest v, against the floats nearest closed bounds.
    const double f = static_cast<float>(v);
    in = (a.min_open ? f > a.min : f >= as_float(a.min)) &&
         (a.max_open ? f < a.max : f <= as_float(a.max));
  }
  return in ? "" : "must be in " + range_text(a) + ", got " + num_text(a, v);
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

const SectionInfo<OptimizerSpec>& optimizer_section() {
  return kOptimizerSection;
}
const SectionInfo<ScheduleSpec>& schedule_section() {
  return kScheduleSection;
}
std::span<const NameInfo> initializer_registry() {
  return kInitializers;
}
std::span<const std::string_view> initializer_names() {
  return kInits;
}
std::span<const NameInfo> loss_registry() {
  return kLosses;
}
std::span<const std::string_view> loss_names() {
  return kLossNames;
}

bool is_listed(std::span<const std::string_view> names, std::string_view name) {
  for (std::string_view n : names)
    if (n == name) return true;
  return false;
}

bool applies_to(std::string_view types, std::string_view type) {
  if (types.empty()) return true;
  while (!types.empty()) {
    const size_t comma = types.find(',');
    std::string_view item = types.substr(0, comma);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    if (item == type) return true;
    if (comma == std::string_view::npos) break;
    types.remove_prefix(comma + 1);
  }
  return false;
}

FieldProblem check_train_fields(const OptimizerSpec& o, const ScheduleSpec& s) {
  if (s.type == "cosine" && s.min_lr > o.lr) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "the cosine floor %.9g is above the learning rate %.9g",
                  static_cast<double>(s.min_lr), static_cast<double>(o.lr));
    return {"schedule.min_lr", buf};
  }
  return {};
}

std::string initializer_table_markdown() {
  return names_table(kInitializers);
}
std::string loss_table_markdown() {
  return names_table(kLosses);
}

std::string optimizer_table_markdown() {
  return section_table(kOptimizerSection);
}
std::string schedule_table_markdown() {
  return section_table(kScheduleSection);
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
  return is_listed(kInits, name);
}

}  // namespace dnnlab::nn
