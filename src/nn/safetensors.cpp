// safetensors writer and a reader for the subset of JSON its header uses.
#include "nn/safetensors.hpp"

#include <cstring>

namespace dnnlab::nn {
namespace {

std::string json_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      o += '\\';
      o += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      o += buf;
    } else {
      o += c;
    }
  }
  return o;
}

// A minimal JSON reader: objects, arrays, strings, integers. Enough for a
// safetensors header; anything else is an error with its offset.
struct JsonValue {
  enum Kind { kObject, kArray, kString, kNumber } kind = kNumber;
  std::vector<std::pair<std::string, JsonValue>> members;
  std::vector<JsonValue> items;
  std::string str;
  int64_t num = 0;
  const JsonValue* get(const std::string& k) const {
    for (auto& m : members)
      if (m.first == k) return &m.second;
    return nullptr;
  }
};

class JsonReader {
 public:
  JsonReader(const std::string& s, size_t base, const std::string& name)
      : s_(s), base_(base), name_(name) {}
  JsonValue parse() {
    JsonValue v = value(0);
    ws();
    if (i_ != s_.size()) fail("trailing characters after the header");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& msg) {
    throw DataError(name_, static_cast<int64_t>(base_ + i_), "safetensors header: " + msg);
  }
  void ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\t' || s_[i_] == '\r'))
      ++i_;
  }
  char peek() {
    ws();
    if (i_ >= s_.size()) fail("unexpected end");
    return s_[i_];
  }
  void expect(char c) {
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++i_;
  }
  std::string string() {
    expect('"');
    std::string o;
    while (i_ < s_.size() && s_[i_] != '"') {
      if (s_[i_] == '\\') {
        if (++i_ >= s_.size()) break;
        char c = s_[i_];
        if (c == 'u') {
          if (i_ + 4 >= s_.size()) fail("bad escape");
          o += static_cast<char>(std::stoi(s_.substr(i_ + 1, 4), nullptr, 16));
          i_ += 4;
        } else {
          o += c == 'n' ? '\n' : c == 't' ? '\t' : c;
        }
      } else {
        o += s_[i_];
      }
      ++i_;
    }
    if (i_ >= s_.size()) fail("unterminated string");
    ++i_;
    return o;
  }
  JsonValue value(int depth) {
    if (depth > 16) fail("nested too deeply");  // a hostile header must not overflow the stack
    JsonValue v;
    char c = peek();
    if (c == '{') {
      v.kind = JsonValue::kObject;
      ++i_;
      if (peek() == '}') return ++i_, v;
      for (;;) {
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
      v.kind = JsonValue::kArray;
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
      v.kind = JsonValue::kString;
      v.str = string();
      return v;
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
      size_t start = i_++;
      while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') ++i_;
      v.num = std::stoll(s_.substr(start, i_ - start));
      return v;
    }
    fail("unexpected character");
  }
  const std::string& s_;
  size_t base_, i_ = 0;
  const std::string& name_;
};

}  // namespace

std::string to_safetensors(const std::vector<Param*>& params,
                           const std::map<std::string, std::string>& metadata) {
  std::string h = "{";
  if (!metadata.empty()) {
    h += "\"__metadata__\":{";
    bool first = true;
    for (auto& [k, v] : metadata) {
      h += (first ? "\"" : ",\"") + json_escape(k) + "\":\"" + json_escape(v) + "\"";
      first = false;
    }
    h += "}";
  }
  int64_t off = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& t = params[i]->value;
    h += (i || !metadata.empty() ? ",\"" : "\"") + json_escape(params[i]->name) +
         "\":{\"dtype\":\"F32\",\"shape\":[";
    for (int d = 0; d < t.shape().rank; ++d) h += (d ? "," : "") + std::to_string(t.shape()[d]);
    const int64_t bytes = t.numel() * 4;
    h += "],\"data_offsets\":[" + std::to_string(off) + "," + std::to_string(off + bytes) + "]}";
    off += bytes;
  }
  h += "}";
  while ((h.size() + 8) % 8) h += ' ';  // keeps the data 8-byte aligned
  std::string out(8, '\0');
  const uint64_t n = h.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  out += h;
  for (Param* p : params)
    out.append(reinterpret_cast<const char*>(p->value.data()), p->value.numel() * 4);
  return out;
}

std::map<std::string, std::string> from_safetensors(const std::string& bytes,
                                                    const std::vector<Param*>& params,
                                                    const std::string& name) {
  if (bytes.size() < 8)
    throw DataError(name, static_cast<int64_t>(bytes.size()),
                    "file too short for a safetensors header");
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i)
    n |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
  if (n > bytes.size() - 8)
    throw DataError(name, 0, "header length " + std::to_string(n) + " exceeds the file");
  const std::string header = bytes.substr(8, n);
  JsonValue root = JsonReader(header, 8, name).parse();
  if (root.kind != JsonValue::kObject) throw DataError(name, 8, "header is not a JSON object");
  const size_t data_start = 8 + n, data_len = bytes.size() - data_start;
  std::map<std::string, std::string> meta;
  if (const JsonValue* m = root.get("__metadata__"))
    for (auto& [k, v] : m->members) meta[k] = v.str;
  for (Param* p : params) {
    const JsonValue* t = root.get(p->name);
    if (!t) throw DataError(name, 8, "tensor '" + p->name + "' is missing");
    const JsonValue* dtype = t->get("dtype");
    const JsonValue* shape = t->get("shape");
    const JsonValue* offs = t->get("data_offsets");
    if (!dtype || dtype->str != "F32" || !shape || !offs || offs->items.size() != 2)
      throw DataError(name, 8, "tensor '" + p->name + "' needs dtype F32, shape and data_offsets");
    Shape s;
    s.rank = static_cast<int>(shape->items.size());
    if (s.rank > kMaxRank)
      throw DataError(name, 8, "tensor '" + p->name + "' has too many dimensions");
    for (int d = 0; d < s.rank; ++d) s[d] = shape->items[d].num;
    if (!(s == p->value.shape()))
      throw DataError(name, 8,
                      "tensor '" + p->name + "' has shape " + s.str() + ", the model expects " +
                          p->value.shape().str());
    const int64_t b = offs->items[0].num, e = offs->items[1].num;
    if (b < 0 || e < b || static_cast<uint64_t>(e) > data_len || e - b != p->value.numel() * 4)
      throw DataError(name, static_cast<int64_t>(data_start),
                      "tensor '" + p->name + "' has bad data_offsets");
    std::memcpy(p->value.data(), bytes.data() + data_start + b, static_cast<size_t>(e - b));
  }
  return meta;
}

}  // namespace dnnlab::nn
