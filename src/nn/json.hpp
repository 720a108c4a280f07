// A small strict JSON reader (RFC 8259), standard library only, for what the
// nn core reads itself: safetensors headers and the browser core's model spec.
// Every value keeps its byte offset so callers can name the place of an error.
//
//   nn::json::Value v = nn::json::parse(R"({"shape":[2,3]})");
//   const nn::json::Value* s = v.get("shape");   // s->items[1].integer, .i == 3
//
// Malformed text throws nn::json::SyntaxError with the offset (plus `base`,
// for text that sits inside a larger file).
#pragma once
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dnnlab::nn::json {

struct Member;

struct Value {
  enum Kind { kNull, kBool, kNumber, kString, kArray, kObject } kind = kNull;
  bool b = false;
  double num = 0;
  bool integer = false;  // a number written without fraction or exponent that fits int64
  int64_t i = 0;         // its exact value
  std::string str;
  std::vector<Value> items;
  std::vector<Member> members;  // in document order
  size_t offset = 0;            // where the value starts (+ base)
  // The first member named `key`, or nullptr.
  const Value* get(std::string_view key) const;
};

// An object's member. Not a std::pair: a pair of an incomplete Value cannot
// be named inside Value itself (clang rejects it with libstdc++).
struct Member {
  std::string first;
  Value second;
};

class SyntaxError : public std::runtime_error {
 public:
  SyntaxError(size_t offset, const std::string& message)
      : std::runtime_error(message), offset_(offset) {}
  size_t offset() const { return offset_; }

 private:
  size_t offset_;
};

// One JSON value and nothing after it but whitespace. Nesting deeper than
// max_depth is an error: hostile input must not overflow the stack.
Value parse(std::string_view text, size_t base = 0, int max_depth = 32);

// `s` as the inside of a JSON string: quotes and backslashes escaped,
// control characters as \u00XX.
std::string escape(std::string_view s);

}  // namespace dnnlab::nn::json
