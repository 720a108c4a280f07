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
  bool min_open = false, max_open = false;  // an open end excludes its bound: lr is (0, 1e9]
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

// Why `v` is not a valid value of `a` ("must be in [1, 1e+09]"), or "": the
// one check of a value that every codec (YAML, wasm JSON, the gateway's JSON)
// asks, for layer and section attributes alike. Numbers must be finite,
// integers whole, booleans 0 or 1; floats are checked as the float they are
// used as, against the floats nearest their closed bounds (so `gamma: 1`
// meets 1 and `rate: 0.999` meets 0.999). Names must be a choice or the
// default text.
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

// ---- the training spec outside the layers ----------------------------------
//
// Optimizer and schedule types, initializers and losses, one row each, and
// the attributes of nn::OptimizerSpec and nn::ScheduleSpec with the types
// that take them. The YAML reader, the wasm JSON reader, the gateway's JSON
// writer and docs/spec.md's optimizer and schedule tables walk these rows.

// A name a spec may write (an optimizer type, a loss) and what it means.
struct NameInfo {
  std::string_view name;
  std::string_view summary;
};

// One attribute of a section (OptimizerSpec, ScheduleSpec): its schema, the
// types that take it, and its field. Floats are stored as float and checked
// as the float they are stored as (check_attr).
template <class Spec>
struct SectionAttr {
  AttrInfo info;
  std::string_view types;  // the types that take it, comma separated; "" = all
  double (*get)(const Spec&);
  void (*set)(Spec&, double);
};

template <class Spec>
struct SectionInfo {
  std::string_view name;                     // "optimizer": the key in `train`
  std::span<const NameInfo> types;           // the first is Spec's default type
  std::span<const std::string_view> names;   // the same types' names, for error messages
  std::span<const SectionAttr<Spec>> attrs;  // in the order writers write them
};

const SectionInfo<OptimizerSpec>& optimizer_section();
const SectionInfo<ScheduleSpec>& schedule_section();
std::span<const NameInfo> initializer_registry();  // he, glorot, lecun
std::span<const std::string_view> initializer_names();
std::span<const NameInfo> loss_registry();  // in LossKind's order
std::span<const std::string_view> loss_names();

// Whether `name` is one of `names`.
bool is_listed(std::span<const std::string_view> names, std::string_view name);
// Whether an attribute whose row says `types` applies to type `type`.
bool applies_to(std::string_view types, std::string_view type);
// Checks between fields of a training spec, after each field's own check:
// the cosine floor must not be above the learning rate. `field` is dotted
// from the train section ("schedule.min_lr"); empty when all is well.
struct FieldProblem {
  std::string field, message;
};
FieldProblem check_train_fields(const OptimizerSpec& o, const ScheduleSpec& s);
// docs/spec.md's `optimizer:` and `schedule:` tables, and its tables of
// initializers and losses, generated from the rows.
std::string optimizer_table_markdown();
std::string schedule_table_markdown();
std::string initializer_table_markdown();
std::string loss_table_markdown();

// Activation layers by name, for `activation:` options and kernel fusion.
bool activation_from_name(std::string_view name, Act* act);
// Initializer names accepted in specs: he, glorot, lecun.
bool is_initializer(std::string_view name);

}  // namespace dnnlab::nn
