// Issue 25, "one description per spec type": the layer, optimizer, schedule,
// initializer and loss rows of the registry (nn/registry.hpp) are the only
// description of those parts of a spec. For every attribute of every row this
// test tries the bounds (at each one, just outside it, just inside an open
// one), non-finite values, nothing (null), a wrong type and a type (or layer)
// the attribute does not apply to through
//   - YAML -> RunSpec (spec::parse_run_spec; a layer's entry through the
//     layer-list reader it calls, so that the model's shape rules, checked
//     after the attributes, do not stand in for an attribute's verdict),
//   - the browser core's JSON reader (wasm::parse_core_spec), and
//   - a RunSpec holding the value -> the gateway's JSON (core_spec_json) ->
//     the browser core's reader,
// and asserts one verdict everywhere (the gateway path is left out where its
// writer cannot express the case: a wrong JSON type, a key it does not write).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "nn/loss.hpp"
#include "nn/registry.hpp"
#include "server/gateway.hpp"
#include "spec/layer_list.hpp"
#include "spec/run_spec.hpp"
#include "spec/yaml_reader.hpp"
#include "spec_json.hpp"

namespace dnnlab::server {
// Named: the unity build puts this file beside others with the same helpers.
namespace spec_bounds {
namespace {

struct Verdict {
  bool accepted = false;
  std::string message;  // the refusal
};

// One key of a section map, as YAML and JSON write it.
struct Entry {
  std::string key, yaml, json;
};

// A whole spec in both formats, from its parts.
struct Spec {
  std::string init = "he", loss = "softmax_cross_entropy";
  std::string init_json = "\"he\"", loss_json = "\"softmax_cross_entropy\"";
  std::vector<Entry> optimizer{{"type", "sgd", "\"sgd\""}};
  std::vector<Entry> schedule{{"type", "constant", "\"constant\""}};

  static std::string yaml_map(const std::vector<Entry>& m) {
    std::string s = "{";
    for (const Entry& e : m) s += (s.size() > 1 ? ", " : "") + e.key + ": " + e.yaml;
    return s + "}";
  }
  static std::string json_map(const std::vector<Entry>& m) {
    std::string s = "{";
    for (const Entry& e : m) s += (s.size() > 1 ? ", \"" : "\"") + e.key + "\": " + e.json;
    return s + "}";
  }
  std::string yaml() const {
    return "name: b\ndata: {dataset: synthetic, validation: 100}\nmodel:\n  init: " + init +
           "\n  loss: " + loss +
           "\n  layers: [{dense: 10}]\ntrain:\n  epochs: 1\n  optimizer: " + yaml_map(optimizer) +
           "\n  schedule: " + yaml_map(schedule) + "\n";
  }
  std::string json() const {
    return R"({"input": [784], "classes": 10, "layers": [{"type": "dense", "units": 10}], "init": )" +
           init_json + ", \"loss\": " + loss_json + ", \"optimizer\": " + json_map(optimizer) +
           ", \"schedule\": " + json_map(schedule) + ", \"epochs\": 1}";
  }
};

Verdict through_yaml(const Spec& s, nn::RunSpec* out = nullptr) {
  try {
    nn::RunSpec run = spec::parse_run_spec(s.yaml(), "b.yaml");
    if (out) *out = std::move(run);
    return {true, ""};
  } catch (const SpecError& e) {
    return {false, e.what()};
  }
}

Verdict through_wasm(const std::string& json, wasm::CoreSpec* out = nullptr) {
  try {
    wasm::CoreSpec c = wasm::parse_core_spec(json);
    if (out) *out = std::move(c);
    return {true, ""};
  } catch (const SpecError& e) {
    return {false, e.what()};
  }
}

// The gateway's JSON of `run` read back by the browser core.
Verdict through_gateway(const nn::RunSpec& run, wasm::CoreSpec* out = nullptr) {
  return through_wasm(core_spec_json(run, {784}, 10).dump(), out);
}

std::string number_text(const nn::AttrInfo& a, double v) {
  char buf[40];
  if (a.kind == nn::AttrKind::kInt)
    std::snprintf(buf, sizeof buf, "%.0f", v);
  else
    std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

// One value tried on one attribute.
struct Try {
  std::string what;
  std::string yaml, json;
  std::optional<double> value;  // what the gateway path stores; none: not expressible there
  bool valid;                   // what the row says
};

// The values tried on attribute `a`. `primary`: it is a layer's value beside
// its name, where YAML reads nothing (`dropout: ~`) as "the default".
std::vector<Try> tries_for(const nn::AttrInfo& a, bool primary = false) {
  std::vector<Try> t;
  if (!primary) t.push_back({"nothing (null)", "~", "null", std::nullopt, false});
  if (a.kind == nn::AttrKind::kEnum) {
    for (std::string_view c : a.choices) {
      const std::string n(c);
      t.push_back({"the choice " + n, n, "\"" + n + "\"", std::nullopt, true});
    }
    // The default text ("": the model's init) may be written out too.
    if (!nn::check_attr(a, a.def_text).empty()) ADD_FAILURE() << a.name << "'s default invalid";
    const std::string d(a.def_text);
    t.push_back({"the default '" + d + "'", "\"" + d + "\"", "\"" + d + "\"", std::nullopt, true});
    for (const char* bad : {"xavier", "HE", "linear"})
      t.push_back({std::string("the name ") + bad, bad, std::string("\"") + bad + "\"",
                   std::nullopt, false});
    t.push_back({"a number", "3", "3", std::nullopt, false});
    t.push_back({"a boolean", "true", "true", std::nullopt, false});
    return t;
  }
  if (a.kind == nn::AttrKind::kBool) {
    t.push_back({"true", "true", "true", 1.0, true});
    t.push_back({"false", "false", "false", 0.0, true});
    t.push_back({"a number", "1", "1", std::nullopt, false});
    t.push_back({"a string", "\"true\"", "\"true\"", std::nullopt, false});
    return t;
  }
  const bool is_int = a.kind == nn::AttrKind::kInt;
  auto add = [&](const std::string& what, double v, bool valid) {
    const std::string text = number_text(a, v);
    t.push_back({what + " " + text, text, text, v, valid});
  };
  const double lo_step = is_int ? 1 : std::max(std::fabs(a.min), 1.0) * 1e-5;
  const double hi_step = is_int ? 1 : std::max(std::fabs(a.max), 1.0) * 1e-5;
  add("the minimum", a.min, !a.min_open);
  add("below the minimum", a.min - lo_step, false);
  if (a.min_open) add("just above an open minimum", a.min + lo_step, true);
  add("the maximum", a.max, !a.max_open);
  add("above the maximum", a.max + hi_step, false);
  if (a.max_open) add("just below an open maximum", a.max - hi_step, true);
  if (is_int) {
    const std::string half = std::to_string(static_cast<int64_t>(a.min)) + ".5";
    t.push_back({"a fraction " + half, half, half, std::nullopt, false});
  }
  // Not finite: YAML's .nan and .inf; JSON has no such numbers (1e999 is out
  // of range, null is what JSON writers make of NaN). The gateway's writer is
  // handed the value itself, for a float (an integer field cannot hold it).
  const double kInf = std::numeric_limits<double>::infinity();
  const auto non_finite = [&](double v) { return is_int ? std::nullopt : std::optional(v); };
  t.push_back({"NaN", ".nan", "null", non_finite(std::nan("")), false});
  t.push_back({"infinity", ".inf", "1e999", non_finite(kInf), false});
  t.push_back({"minus infinity", "-.inf", "-1e999", non_finite(-kInf), false});
  t.push_back({"a string", "\"1\"", "\"1\"", std::nullopt, false});
  t.push_back({"a boolean", "true", "true", std::nullopt, false});
  return t;
}

// The first type of the section that the attribute applies to, and one it
// does not ("" if it applies to all).
template <class S>
std::pair<std::string, std::string> types_for(const nn::SectionInfo<S>& sec,
                                              const nn::SectionAttr<S>& f) {
  std::string yes, no;
  for (const nn::NameInfo& t : sec.types) {
    const bool applies = nn::applies_to(f.types, t.name);
    if (applies && yes.empty()) yes = t.name;
    if (!applies && no.empty()) no = t.name;
  }
  return {yes, no};
}

std::string verdict_text(const char* codec, const Verdict& v) {
  return std::string(codec) + ": " + (v.accepted ? "accepted" : "refused (" + v.message + ")");
}

// Runs one spec through the three codecs and checks their verdicts against
// `valid`. `gateway` makes the RunSpec the gateway writes, from a parsed base.
void expect_one_verdict(const std::string& what, const Spec& spec, bool valid,
                        const std::function<bool(nn::RunSpec&)>& gateway) {
  const Verdict y = through_yaml(spec);
  const Verdict w = through_wasm(spec.json());
  std::optional<Verdict> g;
  if (gateway) {
    nn::RunSpec run;
    if (gateway(run)) g = through_gateway(run);
  }
  std::string all = verdict_text("yaml", y) + "; " + verdict_text("wasm json", w);
  if (g) all += "; " + verdict_text("gateway json", *g);
  EXPECT_EQ(y.accepted, valid) << what << ": " << all;
  EXPECT_EQ(w.accepted, valid) << what << ": " << all;
  if (g) {
    EXPECT_EQ(g->accepted, valid) << what << ": " << all;
  }
}

// A RunSpec as YAML reads `spec` (which must be valid).
nn::RunSpec parsed(const Spec& spec) {
  nn::RunSpec run;
  const Verdict v = through_yaml(spec, &run);
  EXPECT_TRUE(v.accepted) << v.message << "\n" << spec.yaml();
  return run;
}

template <class S>
void walk_section(const nn::SectionInfo<S>& sec, bool optimizer) {
  for (const nn::SectionAttr<S>& f : sec.attrs) {
    const nn::AttrInfo& a = f.info;
    const auto [type, other] = types_for(sec, f);
    ASSERT_FALSE(type.empty()) << a.name << " applies to no type";
    Spec base;
    auto& entries = optimizer ? base.optimizer : base.schedule;
    entries = {{"type", type, "\"" + type + "\""}};
    // A cosine floor may be as high as the rate: give the rate room.
    if (!optimizer) base.optimizer.push_back({"lr", "1000000000", "1000000000"});
    const nn::RunSpec base_run = parsed(base);
    for (const Try& t : tries_for(a)) {
      const std::string what =
          std::string(sec.name) + "." + std::string(a.name) + " (" + type + ") = " + t.what;
      SCOPED_TRACE(what);
      Spec s = base;
      (optimizer ? s.optimizer : s.schedule).push_back({std::string(a.name), t.yaml, t.json});
      std::function<bool(nn::RunSpec&)> gateway;
      if (t.value)
        gateway = [&](nn::RunSpec& run) {
          run = base_run;
          if constexpr (std::is_same_v<S, nn::OptimizerSpec>)
            f.set(run.train.optimizer, *t.value);
          else
            f.set(run.train.schedule, *t.value);
          return true;
        };
      expect_one_verdict(what, s, t.valid, gateway);
      // What is accepted comes back from the gateway as it went in.
      if (t.valid && t.value) {
        nn::RunSpec run = parsed(s);
        wasm::CoreSpec back;
        ASSERT_TRUE(through_gateway(run, &back).accepted);
        if constexpr (std::is_same_v<S, nn::OptimizerSpec>)
          EXPECT_EQ(f.get(back.train.optimizer), f.get(run.train.optimizer));
        else
          EXPECT_EQ(f.get(back.train.schedule), f.get(run.train.schedule));
      }
    }
    if (!other.empty()) {
      // A key the type does not take is refused, not ignored.
      Spec s = base;
      auto& e = optimizer ? s.optimizer : s.schedule;
      e[0] = {"type", other, "\"" + other + "\""};
      const std::string text = number_text(a, a.kind == nn::AttrKind::kBool ? 1 : a.max);
      e.push_back({std::string(a.name), a.kind == nn::AttrKind::kBool ? "true" : text,
                   a.kind == nn::AttrKind::kBool ? "true" : text});
      expect_one_verdict(std::string(sec.name) + "." + std::string(a.name) + " under " + other, s,
                         false, nullptr);
    }
  }
}

TEST(SpecBounds, EveryOptimizerAttributeHasOneVerdictInEveryCodec) {
  walk_section(nn::optimizer_section(), true);
}

TEST(SpecBounds, EveryScheduleAttributeHasOneVerdictInEveryCodec) {
  walk_section(nn::schedule_section(), false);
}

// The type names, initializers and losses: each listed name is accepted
// everywhere (nn included), anything else refused everywhere.
TEST(SpecBounds, EveryTypeInitializerAndLossHasOneVerdictInEveryCodec) {
  struct Named {
    const char* what;
    std::vector<std::string> valid;
    std::function<void(Spec&, const std::string& yaml, const std::string& json)> put;
    std::function<void(nn::RunSpec&, const std::string&)> set;
    std::function<bool(const std::string&)> nn_accepts;  // null: nn has no reader of its own
  };
  auto names = [](auto rows) {
    std::vector<std::string> v;
    for (const nn::NameInfo& r : rows) v.emplace_back(r.name);
    return v;
  };
  const Named kinds[] = {
      {"optimizer.type", names(nn::optimizer_section().types),
       [](Spec& s, const std::string& y, const std::string& j) {
         s.optimizer = {{"type", y, j}};
       },
       [](nn::RunSpec& r, const std::string& v) { r.train.optimizer.type = v; }, nullptr},
      {"schedule.type", names(nn::schedule_section().types),
       [](Spec& s, const std::string& y, const std::string& j) {
         s.schedule = {{"type", y, j}};
       },
       [](nn::RunSpec& r, const std::string& v) { r.train.schedule.type = v; }, nullptr},
      {"init", names(nn::initializer_registry()),
       [](Spec& s, const std::string& y, const std::string& j) {
         s.init = y;
         s.init_json = j;
       },
       [](nn::RunSpec& r, const std::string& v) { r.model.init = v; },
       [](const std::string& v) { return nn::is_initializer(v); }},
      {"loss", names(nn::loss_registry()),
       [](Spec& s, const std::string& y, const std::string& j) {
         s.loss = y;
         s.loss_json = j;
       },
       [](nn::RunSpec& r, const std::string& v) { r.model.loss = v; },
       [](const std::string& v) {
         nn::LossKind k;
         return nn::loss_from_name(v, &k);
       }},
  };
  const nn::RunSpec base_run = parsed(Spec{});
  for (const Named& n : kinds) {
    std::vector<std::pair<std::string, bool>> tries;
    for (const std::string& v : n.valid) tries.emplace_back(v, true);
    // cross_entropy: nn::loss_from_name once took it, no codec did.
    for (const char* bad : {"cross_entropy", "xavier", "adma", "linear", "SGD"}) {
      bool listed = false;
      for (const std::string& v : n.valid) listed = listed || v == bad;
      if (!listed) tries.emplace_back(bad, false);
    }
    for (const auto& [value, valid] : tries) {
      const std::string what = std::string(n.what) + " = " + value;
      SCOPED_TRACE(what);
      Spec s;
      n.put(s, value, "\"" + value + "\"");
      expect_one_verdict(what, s, valid, [&, v = value](nn::RunSpec& run) {
        run = base_run;
        n.set(run, v);
        return true;
      });
      if (n.nn_accepts) {
        EXPECT_EQ(n.nn_accepts(value), valid) << what << " in nn";
      }
    }
    Spec wrong;
    n.put(wrong, "[3]", "3");
    expect_one_verdict(std::string(n.what) + " = a number", wrong, false, nullptr);
  }
}

// ---- layer attributes -------------------------------------------------------

// One layer entry in both formats. JSON writes every attribute as a key;
// YAML writes the primary one (`dense: 64`) beside the layer's name ("~":
// none given) and the others as keys.
struct LayerEntry {
  std::string type, primary;
  std::vector<Entry> keys;

  std::string yaml() const {
    std::string value = "~", rest;
    for (const Entry& e : keys) {
      if (e.key == primary)
        value = e.yaml;
      else
        rest += ", " + e.key + ": " + e.yaml;
    }
    return "- {" + type + ": " + value + rest + "}\n";
  }
  std::string json() const {
    std::string s = R"({"input": [784], "classes": 10, "layers": [{"type": ")" + type + "\"";
    for (const Entry& e : keys) s += ", \"" + e.key + "\": " + e.json;
    return s + "}], \"epochs\": 1}";
  }
};

// The YAML codec of a layer entry: the reader that parse_run_spec gives
// `model.layers`.
Verdict through_yaml_layers(const std::string& yaml) {
  try {
    const spec::detail::YamlReader r("b.yaml");
    spec::detail::read_layer_list(r, r.load(yaml), "model.layers");
    return {true, ""};
  } catch (const SpecError& e) {
    return {false, e.what()};
  }
}

// A valid value of a required attribute (one with no default), as text.
std::string required_value(const nn::AttrInfo& a) {
  return number_text(a, a.min_open ? a.min + 1 : a.min);
}

// `info`'s entry with every required attribute given a valid value.
LayerEntry base_entry(const nn::LayerInfo& info) {
  LayerEntry e{std::string(info.name), std::string(info.primary), {}};
  for (const nn::AttrInfo& a : info.attrs) {
    if (!std::isnan(a.def) || a.kind == nn::AttrKind::kEnum) continue;
    const std::string v = required_value(a);
    e.keys.push_back({std::string(a.name), v, v});
  }
  return e;
}

// The same layer as a LayerSpec: the required attributes, then the defaults.
nn::LayerSpec base_layer(const nn::LayerInfo& info) {
  nn::LayerSpec l;
  l.type = std::string(info.name);
  for (const nn::AttrInfo& a : info.attrs)
    if (std::isnan(a.def) && a.kind != nn::AttrKind::kEnum)
      l.attrs.num[std::string(a.name)] = std::stod(required_value(a));
  EXPECT_EQ(nn::fill_defaults(info, l), "") << info.name;
  return l;
}

void expect_layer_verdict(const std::string& what, const LayerEntry& entry, bool valid,
                          const std::optional<nn::RunSpec>& gateway_run) {
  const Verdict y = through_yaml_layers(entry.yaml());
  const Verdict w = through_wasm(entry.json());
  std::optional<Verdict> g;
  if (gateway_run) g = through_gateway(*gateway_run);
  std::string all = verdict_text("yaml", y) + "; " + verdict_text("wasm json", w);
  if (g) all += "; " + verdict_text("gateway json", *g);
  EXPECT_EQ(y.accepted, valid) << what << ": " << all << "\n" << entry.yaml() << entry.json();
  EXPECT_EQ(w.accepted, valid) << what << ": " << all << "\n" << entry.json();
  if (g) {
    EXPECT_EQ(g->accepted, valid) << what << ": " << all;
  }
}

// Every attribute of every layer type in the registry, in the layer's entry:
// at its bounds, beyond them, not finite, nothing, a wrong type; and on a
// layer that does not take it.
TEST(SpecBounds, EveryLayerAttributeHasOneVerdictInEveryCodec) {
  const nn::RunSpec base_run = parsed(Spec{});
  int walked = 0;
  for (const nn::LayerInfo& info : nn::layer_registry()) {
    // The bare entry is valid everywhere.
    expect_layer_verdict(std::string(info.name) + " with its defaults", base_entry(info), true,
                         [&] {
                           nn::RunSpec run = base_run;
                           run.model.layers = {base_layer(info)};
                           return run;
                         }());
    for (const nn::AttrInfo& a : info.attrs) {
      ++walked;
      const std::string key(a.name);
      for (const Try& t : tries_for(a, a.name == info.primary)) {
        const std::string what = std::string(info.name) + "." + key + " = " + t.what;
        SCOPED_TRACE(what);
        LayerEntry e = base_entry(info);
        std::erase_if(e.keys, [&](const Entry& k) { return k.key == key; });
        e.keys.push_back({key, t.yaml, t.json});
        // The gateway writes what a RunSpec holds: a number, or a name.
        std::optional<nn::RunSpec> run;
        std::optional<std::string> name;
        if (a.kind == nn::AttrKind::kEnum && t.json.starts_with("\""))
          name = t.json.substr(1, t.json.size() - 2);
        if (t.value || name) {
          run = base_run;
          nn::LayerSpec l = base_layer(info);
          if (name)
            l.attrs.text[key] = *name;
          else
            l.attrs.num[key] = *t.value;
          run->model.layers = {l};
        }
        const Verdict y = through_yaml_layers(e.yaml());
        const Verdict w = through_wasm(e.json());
        std::optional<Verdict> g;
        wasm::CoreSpec back;
        if (run) g = through_gateway(*run, &back);
        std::string all = verdict_text("yaml", y) + "; " + verdict_text("wasm json", w);
        if (g) all += "; " + verdict_text("gateway json", *g);
        EXPECT_EQ(y.accepted, t.valid) << what << ": " << all << "\n" << e.yaml();
        EXPECT_EQ(w.accepted, t.valid) << what << ": " << all << "\n" << e.json();
        if (g) {
          EXPECT_EQ(g->accepted, t.valid) << what << ": " << all;
          // What is accepted comes back from the gateway as it went in.
          if (g->accepted && t.valid) {
            ASSERT_EQ(back.model.layers.size(), 1u);
            const nn::LayerSpec& l = back.model.layers[0];
            if (name)
              EXPECT_EQ(l.attrs.str(key), *name) << what;
            else
              EXPECT_EQ(l.attrs.get(key), *t.value) << what;
          }
        }
      }
      // A layer that does not take the attribute refuses it.
      for (const nn::LayerInfo& other : nn::layer_registry()) {
        if (nn::find_attr(other, a.name) || other.inputs == nn::kManyInputs) continue;
        LayerEntry e = base_entry(other);
        const std::string v = a.kind == nn::AttrKind::kEnum   ? "he"
                              : a.kind == nn::AttrKind::kBool ? "true"
                                                              : number_text(a, a.max);
        e.keys.push_back({key, v, a.kind == nn::AttrKind::kEnum ? "\"he\"" : v});
        expect_layer_verdict(key + " on " + std::string(other.name), e, false, std::nullopt);
        break;
      }
    }
  }
  // Every layer's attributes were walked, not a few.
  int listed = 0;
  for (const nn::LayerInfo& info : nn::layer_registry())
    listed += static_cast<int>(info.attrs.size());
  EXPECT_EQ(walked, listed);
  EXPECT_GT(walked, 10);
}

// Cross-field rules hold in every codec too: the cosine floor is at most the rate.
TEST(SpecBounds, TheCosineFloorIsCheckedAgainstTheRateEverywhere) {
  for (const auto& [min_lr, valid] : {std::pair{"0.1", true}, std::pair{"0.5", false}}) {
    Spec s;
    s.optimizer.push_back({"lr", "0.1", "0.1"});
    s.schedule = {{"type", "cosine", "\"cosine\""}, {"min_lr", min_lr, min_lr}};
    nn::RunSpec base = parsed(Spec{});
    base.train.optimizer.lr = 0.1f;
    base.train.schedule.type = "cosine";
    base.train.schedule.min_lr = std::stof(min_lr);
    expect_one_verdict(std::string("cosine min_lr ") + min_lr + " with lr 0.1", s, valid,
                       [&](nn::RunSpec& run) {
                         run = base;
                         return true;
                       });
  }
}

// The rows' defaults are the spec types' defaults.
TEST(SpecBounds, TheRowsDefaultsAreTheSpecTypesDefaults) {
  const nn::OptimizerSpec o;
  EXPECT_EQ(o.type, nn::optimizer_section().types[0].name);
  for (const auto& f : nn::optimizer_section().attrs)
    EXPECT_EQ(static_cast<float>(f.get(o)), static_cast<float>(f.info.def)) << f.info.name;
  const nn::ScheduleSpec s;
  EXPECT_EQ(s.type, nn::schedule_section().types[0].name);
  for (const auto& f : nn::schedule_section().attrs)
    EXPECT_EQ(static_cast<float>(f.get(s)), static_cast<float>(f.info.def)) << f.info.name;
  const nn::ModelSpec m;
  EXPECT_EQ(m.init, nn::initializer_registry()[0].name);
  EXPECT_EQ(m.loss, nn::loss_registry()[0].name);
}

}  // namespace
}  // namespace spec_bounds
}  // namespace dnnlab::server
