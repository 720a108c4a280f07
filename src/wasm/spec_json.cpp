// JSON text -> CoreSpec for the wasm API. See spec_json.hpp.
#include "spec_json.hpp"

#include <cmath>
#include <cstdlib>
#include <utility>
#include <vector>

namespace dnnlab::wasm {
namespace {

struct Json {
  enum Kind { kNull, kBool, kNumber, kString, kArray, kObject } kind = kNull;
  bool b = false;
  double num = 0;
  std::string str;
  std::vector<Json> items;
  std::vector<std::pair<std::string, Json>> members;
  size_t offset = 0;  // where the value starts, for errors
};

[[noreturn]] void fail(size_t offset, const std::string& field, const std::string& msg) {
  SpecLocation where;
  where.file = "<spec json, byte " + std::to_string(offset) + ">";
  throw SpecError(where, field, msg);
}

class JsonReader {
 public:
  explicit JsonReader(const std::string& s) : s_(s) {}
  Json parse() {
    Json v = value(0);
    ws();
    if (i_ != s_.size()) fail(i_, "", "trailing characters after the JSON value");
    return v;
  }

 private:
  void ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\t' || s_[i_] == '\r'))
      ++i_;
  }
  char peek() {
    ws();
    if (i_ >= s_.size()) fail(i_, "", "unexpected end of JSON");
    return s_[i_];
  }
  void expect(char c) {
    if (peek() != c) fail(i_, "", std::string("expected '") + c + "'");
    ++i_;
  }
  void literal(const char* word) {
    for (const char* p = word; *p; ++p, ++i_)
      if (i_ >= s_.size() || s_[i_] != *p) fail(i_, "", std::string("expected '") + word + "'");
  }
  static void utf8(std::string& o, unsigned cp) {
    if (cp < 0x80) {
      o += static_cast<char>(cp);
    } else if (cp < 0x800) {
      o += static_cast<char>(0xC0 | (cp >> 6));
      o += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      o += static_cast<char>(0xE0 | (cp >> 12));
      o += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      o += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }
  std::string string() {
    expect('"');
    std::string o;
    for (;;) {
      if (i_ >= s_.size()) fail(i_, "", "unterminated string");
      char c = s_[i_++];
      if (c == '"') return o;
      if (static_cast<unsigned char>(c) < 0x20) fail(i_ - 1, "", "control character in a string");
      if (c != '\\') {
        o += c;
        continue;
      }
      if (i_ >= s_.size()) fail(i_, "", "unterminated string");
      c = s_[i_++];
      switch (c) {
        case '"':
        case '\\':
        case '/':
          o += c;
          break;
        case 'b':
          o += '\b';
          break;
        case 'f':
          o += '\f';
          break;
        case 'n':
          o += '\n';
          break;
        case 'r':
          o += '\r';
          break;
        case 't':
          o += '\t';
          break;
        case 'u': {
          unsigned cp = 0;
          for (int k = 0; k < 4; ++k, ++i_) {
            if (i_ >= s_.size()) fail(i_, "", "bad \\u escape");
            char h = s_[i_];
            int d = h >= '0' && h <= '9'   ? h - '0'
                    : h >= 'a' && h <= 'f' ? h - 'a' + 10
                    : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                           : -1;
            if (d < 0) fail(i_, "", "bad \\u escape");
            cp = cp * 16 + static_cast<unsigned>(d);
          }
          utf8(o, cp);
          break;
        }
        default:
          fail(i_ - 1, "", "bad escape");
      }
    }
  }
  Json value(int depth) {
    if (depth > 32) fail(i_, "", "JSON nested too deeply");
    Json v;
    char c = peek();
    v.offset = i_;
    if (c == '{') {
      v.kind = Json::kObject;
      ++i_;
      if (peek() == '}') return ++i_, v;
      for (;;) {
        if (peek() != '"') fail(i_, "", "expected a key string");
        std::string k = string();
        expect(':');
        v.members.emplace_back(std::move(k), value(depth + 1));
        if (peek() == ',') {
          ++i_;
          continue;
        }
        expect('}');
        return v;
      }
    }
    if (c == '[') {
      v.kind = Json::kArray;
      ++i_;
      if (peek() == ']') return ++i_, v;
      for (;;) {
        v.items.push_back(value(depth + 1));
        if (peek() == ',') {
          ++i_;
          continue;
        }
        expect(']');
        return v;
      }
    }
    if (c == '"') {
      v.kind = Json::kString;
      v.str = string();
      return v;
    }
    if (c == 't' || c == 'f') {
      v.kind = Json::kBool;
      v.b = c == 't';
      literal(v.b ? "true" : "false");
      return v;
    }
    if (c == 'n') {
      literal("null");
      return v;
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
      size_t start = i_;
      if (s_[i_] == '-') ++i_;
      auto digits = [&] {
        size_t d = i_;
        while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') ++i_;
        if (i_ == d) fail(i_, "", "bad number");
      };
      digits();
      if (i_ < s_.size() && s_[i_] == '.') ++i_, digits();
      if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
        ++i_;
        if (i_ < s_.size() && (s_[i_] == '+' || s_[i_] == '-')) ++i_;
        digits();
      }
      v.kind = Json::kNumber;
      v.num = std::strtod(s_.substr(start, i_ - start).c_str(), nullptr);
      if (!std::isfinite(v.num)) fail(start, "", "number out of range");
      return v;
    }
    fail(i_, "", "unexpected character");
  }
  const std::string& s_;
  size_t i_ = 0;
};

// Typed access to one object's members; every key must be consumed.
class Fields {
 public:
  Fields(const Json& obj, std::string path) : obj_(obj), path_(std::move(path)) {
    if (obj.kind != Json::kObject) fail(obj.offset, path_, "expected an object");
  }
  const Json* find(const char* key) {
    used_.push_back(key);
    for (auto& m : obj_.members)
      if (m.first == key) return m.second.kind == Json::kNull ? nullptr : &m.second;
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

constexpr double kBig = 1e9;

}  // namespace

CoreSpec parse_core_spec(const std::string& text) {
  const Json root = JsonReader(text).parse();
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

  const Json* layers = f.find("layers");
  if (!layers || layers->kind != Json::kArray || layers->items.empty())
    fail(layers ? layers->offset : root.offset, "layers", "expected a non-empty array");
  for (size_t i = 0; i < layers->items.size(); ++i) {
    Fields lf(layers->items[i], "layers[" + std::to_string(i) + "]");
    nn::LayerSpec l;
    l.type = lf.string("type", "");
    if (l.type.empty()) fail(layers->items[i].offset, lf.name("type"), "required");
    l.units = lf.integer("units", 0, 0, 1 << 24);
    l.alpha = static_cast<float>(lf.number("alpha", 0, -kBig, kBig));
    l.init = lf.string("init", "");
    l.bias = lf.boolean("bias", true);
    l.where.file = "<spec json, byte " + std::to_string(layers->items[i].offset) + ">";
    lf.finish();
    ms.layers.push_back(std::move(l));
  }
  ms.init = f.string("init", ms.init);
  ms.loss = f.string("loss", ms.loss);
  if (ms.loss != "softmax_cross_entropy" && ms.loss != "mse")
    fail(root.offset, "loss", "expected \"softmax_cross_entropy\" or \"mse\"");

  if (const Json* o = f.find("optimizer")) {
    Fields of(*o, "optimizer");
    nn::OptimizerSpec& op = ts.optimizer;
    op.type = of.string("type", op.type);
    if (op.type != "sgd" && op.type != "adam" && op.type != "adamw")
      fail(o->offset, "optimizer.type", "expected \"sgd\", \"adam\" or \"adamw\"");
    op.lr = static_cast<float>(of.number("lr", op.lr, 0, kBig));
    op.momentum = static_cast<float>(of.number("momentum", op.momentum, 0, 1));
    op.nesterov = of.boolean("nesterov", op.nesterov);
    op.weight_decay = static_cast<float>(of.number("weight_decay", op.weight_decay, 0, kBig));
    op.beta1 = static_cast<float>(of.number("beta1", op.beta1, 0, 1));
    op.beta2 = static_cast<float>(of.number("beta2", op.beta2, 0, 1));
    op.eps = static_cast<float>(of.number("eps", op.eps, 0, 1));
    of.finish();
  }
  if (const Json* s = f.find("schedule")) {
    Fields sf(*s, "schedule");
    nn::ScheduleSpec& sc = ts.schedule;
    sc.type = sf.string("type", sc.type);
    if (sc.type != "constant" && sc.type != "step" && sc.type != "cosine")
      fail(s->offset, "schedule.type", "expected \"constant\", \"step\" or \"cosine\"");
    sc.step_epochs = static_cast<int>(sf.integer("step_epochs", sc.step_epochs, 1, 1 << 20));
    sc.gamma = static_cast<float>(sf.number("gamma", sc.gamma, 0, kBig));
    sc.min_lr = static_cast<float>(sf.number("min_lr", sc.min_lr, 0, kBig));
    sc.warmup_epochs = static_cast<int>(sf.integer("warmup_epochs", sc.warmup_epochs, 0, 1 << 20));
    sf.finish();
  }
  ts.batch_size = static_cast<int>(f.integer("batch_size", ts.batch_size, 1, 1 << 20));
  ts.seed = static_cast<uint64_t>(f.integer("seed", 1, 0, (int64_t{1} << 53)));
  ts.epochs = static_cast<int>(f.integer("epochs", 1, 1, 1 << 20));
  f.finish();
  return out;
}

}  // namespace dnnlab::wasm
