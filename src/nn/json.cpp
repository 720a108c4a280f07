// The JSON reader of json.hpp: recursive descent over a string_view.
#include "nn/json.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace dnnlab::nn::json {
namespace {

class Reader {
 public:
  Reader(std::string_view s, size_t base, int max_depth)
      : s_(s), base_(base), max_depth_(max_depth) {}
  Value parse() {
    Value v = value(0);
    ws();
    if (i_ != s_.size()) fail(i_, "trailing characters after the JSON value");
    return v;
  }

 private:
  [[noreturn]] void fail(size_t at, const std::string& msg) { throw SyntaxError(base_ + at, msg); }
  void ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\t' || s_[i_] == '\r'))
      ++i_;
  }
  char peek() {
    ws();
    if (i_ >= s_.size()) fail(i_, "unexpected end of JSON");
    return s_[i_];
  }
  void expect(char c) {
    if (peek() != c) fail(i_, std::string("expected '") + c + "'");
    ++i_;
  }
  void literal(const char* word) {
    for (const char* p = word; *p; ++p, ++i_)
      if (i_ >= s_.size() || s_[i_] != *p) fail(i_, std::string("expected '") + word + "'");
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
      if (i_ >= s_.size()) fail(i_, "unterminated string");
      char c = s_[i_++];
      if (c == '"') return o;
      if (static_cast<unsigned char>(c) < 0x20) fail(i_ - 1, "control character in a string");
      if (c != '\\') {
        o += c;
        continue;
      }
      if (i_ >= s_.size()) fail(i_, "unterminated string");
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
            if (i_ >= s_.size()) fail(i_, "bad \\u escape");
            const char h = s_[i_];
            const int d = h >= '0' && h <= '9'   ? h - '0'
                          : h >= 'a' && h <= 'f' ? h - 'a' + 10
                          : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                                 : -1;
            if (d < 0) fail(i_, "bad \\u escape");
            cp = cp * 16 + static_cast<unsigned>(d);
          }
          utf8(o, cp);  // surrogate pairs stay two code points
          break;
        }
        default:
          fail(i_ - 1, std::string("bad escape '\\") + c + "'");
      }
    }
  }
  Value value(int depth) {
    if (depth > max_depth_) fail(i_, "JSON nested too deeply");
    Value v;
    const char c = peek();
    v.offset = base_ + i_;
    if (c == '{') {
      v.kind = Value::kObject;
      ++i_;
      if (peek() == '}') return ++i_, v;
      for (;;) {
        if (peek() != '"') fail(i_, "expected a key string");
        std::string k = string();
        expect(':');
        v.members.push_back({std::move(k), value(depth + 1)});
        if (peek() == ',') {
          ++i_;
          continue;
        }
        expect('}');
        return v;
      }
    }
    if (c == '[') {
      v.kind = Value::kArray;
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
      v.kind = Value::kString;
      v.str = string();
      return v;
    }
    if (c == 't' || c == 'f') {
      v.kind = Value::kBool;
      v.b = c == 't';
      literal(v.b ? "true" : "false");
      return v;
    }
    if (c == 'n') {
      literal("null");
      return v;
    }
    if (c == '-' || (c >= '0' && c <= '9')) return number();
    fail(i_, "unexpected character");
  }
  Value number() {
    Value v;
    v.kind = Value::kNumber;
    v.offset = base_ + i_;
    const size_t start = i_;
    const bool neg = s_[i_] == '-';
    if (neg) ++i_;
    auto digits = [&] {
      const size_t d = i_;
      while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') ++i_;
      if (i_ == d) fail(i_, "bad number: expected a digit");
    };
    const size_t int_start = i_;
    digits();
    const size_t int_end = i_;
    bool fraction = false;
    if (i_ < s_.size() && s_[i_] == '.') ++i_, digits(), fraction = true;
    if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
      ++i_;
      if (i_ < s_.size() && (s_[i_] == '+' || s_[i_] == '-')) ++i_;
      digits();
      fraction = true;
    }
    const std::string text(s_.substr(start, i_ - start));
    v.num = std::strtod(text.c_str(), nullptr);
    if (!std::isfinite(v.num)) fail(start, "number out of range");
    if (!fraction && int_end - int_start <= 18) {  // 18 digits always fit int64
      int64_t n = 0;
      for (size_t k = int_start; k < int_end; ++k) n = n * 10 + (s_[k] - '0');
      v.integer = true;
      v.i = neg ? -n : n;
    }
    return v;
  }

  std::string_view s_;
  size_t base_;
  int max_depth_;
  size_t i_ = 0;
};

}  // namespace

const Value* Value::get(std::string_view key) const {
  for (const auto& m : members)
    if (m.first == key) return &m.second;
  return nullptr;
}

Value parse(std::string_view text, size_t base, int max_depth) {
  return Reader(text, base, max_depth).parse();
}

std::string escape(std::string_view s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      o += '\\';
      o += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x",
                    static_cast<unsigned>(static_cast<unsigned char>(c)));
      o += buf;
    } else {
      o += c;
    }
  }
  return o;
}

}  // namespace dnnlab::nn::json
