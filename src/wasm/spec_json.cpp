// JSON text -> CoreSpec for the wasm API. See spec_json.hpp.
#include "spec_json.hpp"

#include <cmath>
#include <cstdlib>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "nn/json.hpp"
#include "nn/registry.hpp"

namespace dnnlab::wasm {
namespace {

using Json = nn::json::Value;

[[noreturn]] void fail(size_t offset, const std::string& field, const std::string& msg) {
  SpecLocation where;
  where.file = "<spec json, byte " + std::to_string(offset) + ">";
  throw SpecError(where, field, msg);
}

Json parse_json(const std::string& text) {
  try {
    return nn::json::parse(text);
  } catch (const nn::json::SyntaxError& e) {
    fail(e.offset(), "", e.what());
  }
}

// Typed access to one object's members; every key must be consumed.
class Fields {
 public:
  Fields(const Json& obj, std::string path) : obj_(obj), path_(std::move(path)) {
    if (obj.kind != Json::kObject) fail(obj.offset, path_, "expected an object");
  }
  // A null reads as absent (the default), except with `attribute`: a registry
  // attribute's null (what JSON writers make of NaN and infinities) is then
  // refused, as YAML refuses `.nan` and `~`, not read as the default.
  const Json* find(const char* key, bool attribute = false) {
    used_.push_back(key);
    for (auto& m : obj_.members)
      if (m.first == key) return m.second.kind == Json::kNull && !attribute ? nullptr : &m.second;
    return nullptr;
  }
  std::string name(const char* key) const { return path_.empty() ? key : path_ + "." + key; }
  double number(const char* key, double def, double lo, double hi) {
    const Json* v = find(key);
    if (!v) return def;
    if (v->kind != Json::kNumber) fail(v->offset, name(key), "expected a number");
    if (v->num < lo || v->num > hi)
      fail(v->offset, name(key),
           "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    return v->num;
  }
  int64_t integer(const char* key, int64_t def, int64_t lo, int64_t hi) {
    const Json* v = find(key);
    double d =
        number(key, static_cast<double>(def), static_cast<double>(lo), static_cast<double>(hi));
    if (v && d != std::floor(d)) fail(v->offset, name(key), "expected an integer");
    return static_cast<int64_t>(d);
  }
  // A 64-bit seed: a number up to 2^53 (exact in JS), or a string of decimal
  // digits for any uint64 (what the server sends: JSON.parse would round it).
  uint64_t seed(const char* key, uint64_t def) {
    const Json* v = find(key);
    if (!v) return def;
    if (v->kind == Json::kString) {
      const std::string& t = v->str;
      uint64_t x = 0;
      bool ok = !t.empty() && t.size() <= 20;
      for (char c : t) {
        if (c < '0' || c > '9' || x > (UINT64_MAX - (c - '0')) / 10) {
          ok = false;
          break;
        }
        x = x * 10 + static_cast<uint64_t>(c - '0');
      }
      if (!ok) fail(v->offset, name(key), "expected decimal digits of an unsigned 64-bit integer");
      return x;
    }
    return static_cast<uint64_t>(integer(key, 0, 0, int64_t{1} << 53));
  }
  bool boolean(const char* key, bool def) {
    const Json* v = find(key);
    if (!v) return def;
    if (v->kind != Json::kBool) fail(v->offset, name(key), "expected true or false");
    return v->b;
  }
  std::string string(const char* key, const std::string& def) {
    const Json* v = find(key);
    if (!v) return def;
    if (v->kind != Json::kString) fail(v->offset, name(key), "expected a string");
    return v->str;
  }
  // Call after reading every known key.
  void finish() const {
    for (auto& m : obj_.members) {
      bool known = false;
      for (auto& u : used_) known = known || m.first == u;
      if (!known) fail(m.second.offset, name(m.first.c_str()), "unknown key");
    }
  }

 private:
  const Json& obj_;
  std::string path_;
  std::vector<std::string> used_;
};

// One of `names`, or a SpecError listing them.
std::string one_of(Fields& f, const char* key, const std::string& def,
                   std::span<const std::string_view> names) {
  const Json* v = f.find(key);
  const std::string got = f.string(key, def);
  if (nn::is_listed(names, got)) return got;
  std::string list;
  for (std::string_view n : names) list += (list.empty() ? "\"" : "\", \"") + std::string(n);
  fail(v ? v->offset : 0, f.name(key), "expected " + list + "\"");
}

// `optimizer` or `schedule` as the registry's rows describe them (the YAML
// reader and the gateway's writer walk the same rows): each key's type and
// range, and only the keys the section's type takes.
template <class S>
void read_section(const Json& obj, const nn::SectionInfo<S>& sec, S& out) {
  const std::string section(sec.name);
  Fields f(obj, section);
  out.type = one_of(f, "type", out.type, sec.names);
  for (const nn::SectionAttr<S>& row : sec.attrs) {
    const nn::AttrInfo& a = row.info;
    const std::string key(a.name);
    const Json* v = f.find(key.c_str(), /*attribute=*/true);
    if (!v) continue;
    const std::string name = f.name(key.c_str());
    if (!nn::applies_to(row.types, out.type))
      fail(v->offset, name,
           "'" + key + "' applies only to type " + std::string(row.types) + ", not '" + out.type +
               "'");
    double x = 0;
    if (a.kind == nn::AttrKind::kBool) {
      if (v->kind != Json::kBool) fail(v->offset, name, "expected true or false");
      x = v->b ? 1 : 0;
    } else {
      if (v->kind != Json::kNumber) fail(v->offset, name, "expected a finite number");
      x = v->num;
    }
    const std::string problem = nn::check_attr(a, x);
    if (!problem.empty()) fail(v->offset, name, problem);
    row.set(out, x);
  }
  f.finish();
}

// One layer list (`layers`, or a part's) appended to ms.layers; `path` names
// it in errors. `may_be_empty`: the last of several parts (nn::Model builds
// an empty last part as the identity).
void read_layers(const Json& list, const std::string& path, nn::ModelSpec& ms,
                 bool may_be_empty = false) {
  if (list.kind != Json::kArray) fail(list.offset, path, "expected a non-empty array");
  if (list.items.empty() && !may_be_empty)
    fail(list.offset, path,
         path == "layers" ? "expected a non-empty array"
                          : "expected a non-empty array (only the last of several parts may be "
                            "empty)");
  for (size_t i = 0; i < list.items.size(); ++i) {
    const Json& item = list.items[i];
    Fields lf(item, path + "[" + std::to_string(i) + "]");
    nn::LayerSpec l;
    l.type = lf.string("type", "");
    if (l.type.empty()) fail(item.offset, lf.name("type"), "required");
    const nn::LayerInfo* info = nn::find_layer(l.type);
    if (!info) fail(item.offset, lf.name("type"), "unknown layer '" + l.type + "'");
    l.name = lf.string("name", "");
    if (const Json* in = lf.find("inputs")) {
      if (in->kind != Json::kArray) fail(in->offset, lf.name("inputs"), "expected an array");
      for (const Json& v : in->items) {
        if (v.kind != Json::kString) fail(v.offset, lf.name("inputs"), "expected names");
        l.inputs.push_back(v.str);
      }
    }
    // Every attribute as the registry describes it: type, range, choices.
    for (const nn::AttrInfo& a : info->attrs) {
      const std::string key(a.name);
      const Json* v = lf.find(key.c_str(), /*attribute=*/true);
      if (!v) continue;
      std::string err;
      if (a.kind == nn::AttrKind::kEnum) {
        if (v->kind != Json::kString) fail(v->offset, lf.name(key.c_str()), "expected a string");
        err = nn::check_attr(a, v->str);
        l.attrs.text[key] = v->str;
      } else if (a.kind == nn::AttrKind::kBool) {
        if (v->kind != Json::kBool) fail(v->offset, lf.name(key.c_str()), "expected true or false");
        l.attrs.num[key] = v->b ? 1 : 0;
      } else {
        if (v->kind != Json::kNumber)
          fail(v->offset, lf.name(key.c_str()), "expected a finite number");
        err = nn::check_attr(a, v->num);
        l.attrs.num[key] = v->num;
      }
      if (!err.empty()) fail(v->offset, lf.name(key.c_str()), err);
    }
    const std::string missing = nn::fill_defaults(*info, l);
    if (!missing.empty()) fail(item.offset, lf.name(missing.c_str()), "required");
    l.where.file = "<spec json, byte " + std::to_string(item.offset) + ">";
    lf.finish();
    ms.layers.push_back(std::move(l));
  }
}

}  // namespace

CoreSpec parse_core_spec(const std::string& text) {
  const Json root = parse_json(text);
  Fields f(root, "");
  CoreSpec out;
  nn::ModelSpec& ms = out.model;
  nn::TrainSpec& ts = out.train;
  ms.where.file = "<spec json>";

  const Json* input = f.find("input");
  if (!input) fail(root.offset, "input", "required (one sample's shape, e.g. [784])");
  if (input->kind != Json::kArray || input->items.empty() || input->items.size() > 3)
    fail(input->offset, "input", "expected an array of 1 to 3 positive integers");
  for (const Json& d : input->items) {
    if (d.kind != Json::kNumber || d.num < 1 || d.num > 1 << 24 || d.num != std::floor(d.num))
      fail(d.offset, "input", "expected positive integers");
    ms.input.push_back(static_cast<int64_t>(d.num));
  }
  out.classes = f.integer("classes", 0, 1, 1 << 20);
  if (out.classes == 0) fail(root.offset, "classes", "required (the number of classes)");

  // `layers`, or `parts`: named layer lists in order, whose concatenation is
  // the model (as in the YAML; an array, since JSON objects keep no order).
  const Json* layers = f.find("layers");
  const Json* parts = f.find("parts");
  if (layers && parts) fail(parts->offset, "parts", "a model has `layers` or `parts`, not both");
  if (!layers && !parts) fail(root.offset, "layers", "required (or `parts`)");
  if (layers) read_layers(*layers, "layers", ms);
  if (parts) {
    if (parts->kind != Json::kArray || parts->items.empty())
      fail(parts->offset, "parts", "expected a non-empty array of {\"name\", \"layers\"}");
    for (size_t i = 0; i < parts->items.size(); ++i) {
      const Json& item = parts->items[i];
      Fields pf(item, "parts[" + std::to_string(i) + "]");
      nn::PartSpec ps;
      ps.name = pf.string("name", "");
      if (ps.name.empty()) fail(item.offset, pf.name("name"), "required");
      for (const nn::PartSpec& q : ms.parts)
        if (q.name == ps.name) fail(item.offset, pf.name("name"), "'" + ps.name + "' twice");
      const Json* pl = pf.find("layers");
      if (!pl) fail(item.offset, pf.name("layers"), "required");
      ps.begin = ms.layers.size();
      read_layers(*pl, pf.name("layers"), ms, i > 0 && i + 1 == parts->items.size());
      ps.end = ms.layers.size();
      pf.finish();
      ms.parts.push_back(std::move(ps));
    }
  }
  ms.init = one_of(f, "init", ms.init, nn::initializer_names());
  ms.loss = one_of(f, "loss", ms.loss, nn::loss_names());
  if (const Json* o = f.find("optimizer")) read_section(*o, nn::optimizer_section(), ts.optimizer);
  if (const Json* s = f.find("schedule")) read_section(*s, nn::schedule_section(), ts.schedule);
  const nn::FieldProblem p = nn::check_train_fields(ts.optimizer, ts.schedule);
  if (!p.field.empty()) fail(root.offset, p.field, p.message);
  ts.batch_size = static_cast<int>(f.integer("batch_size", ts.batch_size, 1, 1 << 20));
  ts.seed = f.seed("seed", 1);
  ts.epochs = static_cast<int>(f.integer("epochs", 1, 1, 1 << 20));
  f.finish();
  return out;
}

}  // namespace dnnlab::wasm
