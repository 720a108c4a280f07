// Typed, located reads from a yaml-cpp tree. Every failure becomes a
// SpecError naming file:line:column and the field's dotted path, so the
// section parsers above it hold tables of fields rather than error handling.
#pragma once
#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "nn/errors.hpp"

namespace dnnlab::spec::detail {

// Bounds on what one spec or sweep document may make the parser do: its size,
// and the number of nodes it stands for once every alias is expanded (a
// 700-byte "billion laughs" document stands for 10^9). Specs are sent by
// strangers over the REST API; a real one is a few KiB and a few hundred nodes.
inline constexpr size_t kMaxYamlBytes = size_t{1} << 20;
inline constexpr int64_t kMaxYamlNodes = 100000;
// How deep collections may nest, aliases expanded: every walk of the tree
// (ours and yaml-cpp's) recurses once per level, and a 200 KB `[[[[...` is
// 100,000 levels. The deepest real spec (blocks nested in blocks in a sweep
// template) is about 20.
inline constexpr int kMaxYamlDepth = 64;

// A numeric range; open ends exclude their bound (lr is (0, inf)).
struct Range {
  double lo, hi;
  bool lo_open = false, hi_open = false;
  bool contains(double v) const {
    return (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
  }
  // For a value read as a float: a closed bound is compared as the float
  // nearest to it, which is what its own text reads as, so `dropout: 0.999`
  // meets the bound 0.999 (as doubles, 0.999f is above 0.999).
  bool contains_float(float v) const {
    return (lo_open ? v > lo : v >= as_float(lo)) && (hi_open ? v < hi : v <= as_float(hi));
  }
  // A bound as the float nearest to it (beyond float's range: itself).
  static double as_float(double b) {
    return b >= -3.4e38 && b <= 3.4e38 ? static_cast<double>(static_cast<float>(b)) : b;
  }
  std::string describe() const;  // "> 0", "in [0, 1)", ">= 1"
};

// "did you mean 'epochs'? (valid: epochs, batch_size, ...)" for an unknown
// name, choosing the closest valid name by edit distance.
std::string suggest(std::string_view got, std::span<const std::string_view> valid);
size_t edit_distance(std::string_view a, std::string_view b);

class YamlReader {
 public:
  explicit YamlReader(std::string file) : file_(std::move(file)) {}
  const std::string& file() const { return file_; }

  SpecLocation where(const YAML::Mark& m) const;
  SpecLocation where(const YAML::Node& n) const { return where(n.Mark()); }
  [[noreturn]] void fail(const YAML::Node& n, const std::string& path,
                         const std::string& message) const;

  // Scalars. A quoted scalar is a string, never a number or a boolean.
  int64_t integer(const YAML::Node& n, const std::string& path, const Range& range) const;
  uint64_t unsigned_integer(const YAML::Node& n, const std::string& path) const;
  float real(const YAML::Node& n, const std::string& path, const Range& range) const;
  bool boolean(const YAML::Node& n, const std::string& path) const;
  std::string string(const YAML::Node& n, const std::string& path) const;
  // One of `valid`; otherwise "unknown <what> 'x'; did you mean ...".
  std::string choice(const YAML::Node& n, const std::string& path, std::string_view what,
                     std::span<const std::string_view> valid) const;
  // The first document of `text` as a tree, within kMaxYamlBytes,
  // kMaxYamlNodes and kMaxYamlDepth (aliases counted as what they expand to),
  // and without cycles (`a: &x [*x]`, an alias inside the node it names, would
  // make every walk of the tree endless). The document is checked as a stream
  // of events before any tree is built; syntax errors and the limits are
  // SpecErrors at the offending line:column.
  YAML::Node load(const std::string& text) const;
  // A map (or nothing, which reads as an empty map): its keys as scalars, with
  // duplicates rejected (hashed: linear in the number of keys).
  std::vector<std::pair<YAML::Node, YAML::Node>> entries(const YAML::Node& n,
                                                         const std::string& path) const;

 private:
  std::string file_;
};

// "a list", "a map", "nothing", "the string \"abc\"", "abc": how a node reads
// in "expected X, got Y" messages.
std::string describe_node(const YAML::Node& n);
// A path's child: join("train", "lr") = "train.lr"; join("", "name") = "name".
std::string join(const std::string& path, std::string_view key);

// Writing canonical YAML: floats in their shortest exact form (they read
// back bit for bit), strings quoted only where YAML would misread them.
std::string yaml_float(float v);
std::string yaml_string(const std::string& s);

// One key of a section: how to read it into T, how to write it back (null
// for nested sections, which their parent writes; an empty result writes
// nothing), and for keys that only some `type`s take, which types (comma
// separated). One table per section serves the parser and to_yaml alike.
template <class T>
struct Field {
  std::string_view key;
  void (*read)(const YamlReader& r, const YAML::Node& value, const std::string& path, T& out);
  std::string (*write)(const T& in) = nullptr;
  std::string_view only_for = {};
};

std::string unknown_key_message(std::string_view key, std::string_view section,
                                std::span<const std::string_view> valid);
bool listed(std::string_view comma_list, std::string_view item);

// Reads a map section field by field through its table: unknown keys are
// errors with a suggestion; keys limited to some `type`s are checked against
// out.type once the whole map has been read (the type may come last).
template <class T, size_t N>
void read_fields(const YamlReader& r, const YAML::Node& map, const std::string& path,
                 const Field<T> (&table)[N], T& out) {
  std::vector<std::string_view> keys;
  for (const Field<T>& f : table) keys.push_back(f.key);
  std::vector<std::pair<YAML::Node, const Field<T>*>> seen;
  for (const auto& [key, value] : r.entries(map, path)) {
    const std::string& k = key.Scalar();
    const Field<T>* field = nullptr;
    for (const Field<T>& f : table)
      if (f.key == k) field = &f;
    if (!field) r.fail(key, join(path, k), unknown_key_message(k, path, keys));
    field->read(r, value, join(path, k), out);
    seen.emplace_back(key, field);
  }
  if constexpr (requires { out.type; }) {
    for (const auto& [key, field] : seen)
      if (!field->only_for.empty() && !listed(field->only_for, out.type))
        r.fail(key, join(path, field->key),
               "'" + std::string(field->key) + "' applies only to type " +
                   std::string(field->only_for) + ", not '" + out.type + "'");
  }
}

// Writes the table's scalar fields that apply to `in` as `key: value` lines.
template <class T, size_t N>
void write_fields(std::string& out, const std::string& indent, const Field<T> (&table)[N],
                  const T& in) {
  for (const Field<T>& f : table) {
    if (!f.write) continue;
    if constexpr (requires { in.type; })
      if (!f.only_for.empty() && !listed(f.only_for, in.type)) continue;
    std::string text = f.write(in);
    if (!text.empty()) out += indent + std::string(f.key) + ": " + text + "\n";
  }
}

}  // namespace dnnlab::spec::detail
