// Typed, located reads from a yaml-cpp tree (see yaml_reader.hpp).
#include "spec/yaml_reader.hpp"

#include <yaml-cpp/eventhandler.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>
#include <unordered_map>

namespace dnnlab::spec::detail {
namespace {

// Bounds read as people write them: 1000000 not 1e+06, and a float bound
// (the registry's 0.999f) in its own shortest form.
std::string number_text(double v) {
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (v == std::floor(v) && std::fabs(v) < 1e15) return std::to_string(static_cast<int64_t>(v));
  char buf[32];
  auto f = static_cast<float>(v);
  auto res = static_cast<double>(f) == v ? std::to_chars(buf, buf + sizeof buf, f)
                                         : std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, res.ptr);
}

// A quoted scalar ('5', "5") carries the non-specific tag "!": it is a string.
bool is_quoted(const YAML::Node& n) {
  return n.Tag() == "!";
}

// Plain scalar text with an optional leading '+' dropped (from_chars rejects it).
std::string_view numeric_text(const std::string& s) {
  std::string_view t = s;
  if (!t.empty() && t.front() == '+') t.remove_prefix(1);
  return t;
}

template <class T>
bool parse_exact(std::string_view text, T* out) {
  if (text.empty()) return false;
  auto res = std::from_chars(text.data(), text.data() + text.size(), *out);
  return res.ec == std::errc() && res.ptr == text.data() + text.size();
}

}  // namespace

std::string Range::describe() const {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  if (hi == kInf || hi >= 1e18) return std::string(lo_open ? "> " : ">= ") + number_text(lo);
  return "in " + std::string(lo_open ? "(" : "[") + number_text(lo) + ", " + number_text(hi) +
         (hi_open ? ")" : "]");
}

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      bool same = std::tolower(static_cast<unsigned char>(a[i - 1])) ==
                  std::tolower(static_cast<unsigned char>(b[j - 1]));
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (same ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

std::string suggest(std::string_view got, std::span<const std::string_view> valid) {
  std::string_view best;
  size_t best_d = std::numeric_limits<size_t>::max();
  for (std::string_view v : valid) {
    size_t d = edit_distance(got, v);
    if (d < best_d) best_d = d, best = v;
  }
  std::string s;
  // Close enough to be a typo: a couple of edits, or a third of the word.
  if (!best.empty() && (best_d <= 2 || best_d * 3 <= got.size()) && best_d < got.size())
    s = "did you mean '" + std::string(best) + "'? ";
  s += "(valid: ";
  for (size_t i = 0; i < valid.size(); ++i) s += (i ? ", " : "") + std::string(valid[i]);
  return s + ")";
}

std::string unknown_key_message(std::string_view key, std::string_view section,
                                std::span<const std::string_view> valid) {
  std::string where = section.empty() ? "at the top level" : "in '" + std::string(section) + "'";
  return "unknown key '" + std::string(key) + "' " + where + "; " + suggest(key, valid);
}

bool listed(std::string_view comma_list, std::string_view item) {
  while (!comma_list.empty()) {
    size_t comma = comma_list.find(',');
    std::string_view head = comma_list.substr(0, comma);
    while (!head.empty() && head.front() == ' ') head.remove_prefix(1);
    if (head == item) return true;
    if (comma == std::string_view::npos) break;
    comma_list.remove_prefix(comma + 1);
  }
  return false;
}

std::string describe_node(const YAML::Node& n) {
  if (!n.IsDefined() || n.IsNull()) return "nothing";
  if (n.IsSequence()) return "a list";
  if (n.IsMap()) return "a map";
  if (is_quoted(n)) return "the string \"" + n.Scalar() + "\"";
  return "'" + n.Scalar() + "'";
}

std::string join(const std::string& path, std::string_view key) {
  return path.empty() ? std::string(key) : path + "." + std::string(key);
}

std::string yaml_float(float v) {
  char buf[32];
  auto res = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, res.ptr);
}

std::string yaml_string(const std::string& s) {
  static constexpr std::string_view kWords[] = {"null", "Null", "NULL",  "~",     "true",
                                                "True", "TRUE", "false", "False", "FALSE",
                                                "yes",  "no",   "on",    "off"};
  bool plain = !s.empty() && std::isalpha(static_cast<unsigned char>(s[0]));
  for (char c : s)
    plain = plain && (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' ||
                      c == '.' || c == '/');
  for (std::string_view w : kWords) plain = plain && s != w;
  if (plain) return s;
  std::string q = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      q += '\\';
      q += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned char>(c));
      q += buf;
    } else {
      q += c;
    }
  }
  return q + "\"";
}

SpecLocation YamlReader::where(const YAML::Mark& m) const {
  SpecLocation loc;
  loc.file = file_;
  if (m.line >= 0) {
    loc.line = m.line + 1;
    loc.column = m.column + 1;
  }
  return loc;
}

void YamlReader::fail(const YAML::Node& n, const std::string& path,
                      const std::string& message) const {
  throw SpecError(where(n), path, message);
}

int64_t YamlReader::integer(const YAML::Node& n, const std::string& path,
                            const Range& range) const {
  int64_t v = 0;
  if (!n.IsScalar() || is_quoted(n) || !parse_exact(numeric_text(n.Scalar()), &v)) {
    double d;
    bool is_number = n.IsScalar() && !is_quoted(n) && parse_exact(numeric_text(n.Scalar()), &d);
    std::string got = describe_node(n);
    if (is_number)
      got = d == std::floor(d) ? n.Scalar() + " (write integers without a point or exponent)"
                               : "the non-integer " + n.Scalar();
    fail(n, path, "expected an integer, got " + got);
  }
  if (!range.contains(static_cast<double>(v)))
    fail(n, path, "must be " + range.describe() + ", got " + n.Scalar());
  return v;
}

uint64_t YamlReader::unsigned_integer(const YAML::Node& n, const std::string& path) const {
  uint64_t v = 0;
  if (!n.IsScalar() || is_quoted(n) || !parse_exact(numeric_text(n.Scalar()), &v))
    fail(n, path, "expected an integer in [0, 2^64), got " + describe_node(n));
  return v;
}

float YamlReader::real(const YAML::Node& n, const std::string& path, const Range& range) const {
  float v = 0;
  if (!n.IsScalar() || is_quoted(n)) fail(n, path, "expected a number, got " + describe_node(n));
  if (!parse_exact(numeric_text(n.Scalar()), &v) || !std::isfinite(v))
    fail(n, path, "expected a finite number, got " + describe_node(n));
  if (!range.contains_float(v))
    fail(n, path, "must be " + range.describe() + ", got " + n.Scalar());
  return v;
}

bool YamlReader::boolean(const YAML::Node& n, const std::string& path) const {
  if (n.IsScalar() && !is_quoted(n)) {
    const std::string& s = n.Scalar();
    if (s == "true" || s == "True" || s == "TRUE" || s == "yes" || s == "on") return true;
    if (s == "false" || s == "False" || s == "FALSE" || s == "no" || s == "off") return false;
  }
  fail(n, path, "expected true or false, got " + describe_node(n));
}

std::string YamlReader::string(const YAML::Node& n, const std::string& path) const {
  if (!n.IsScalar() || n.Scalar().empty())
    fail(n, path, "expected a string, got " + describe_node(n));
  return n.Scalar();
}

std::string YamlReader::choice(const YAML::Node& n, const std::string& path, std::string_view what,
                               std::span<const std::string_view> valid) const {
  std::string s = string(n, path);
  if (std::find(valid.begin(), valid.end(), s) == valid.end())
    fail(n, path, "unknown " + std::string(what) + " '" + s + "'; " + suggest(s, valid));
  return s;
}

std::vector<std::pair<YAML::Node, YAML::Node>> YamlReader::entries(const YAML::Node& n,
                                                                   const std::string& path) const {
  std::vector<std::pair<YAML::Node, YAML::Node>> out;
  if (!n.IsDefined() || n.IsNull()) return out;
  if (!n.IsMap()) fail(n, path, "expected a map of keys, got " + describe_node(n));
  std::unordered_map<std::string_view, size_t> first;  // key -> its index in out
  for (auto it = n.begin(); it != n.end(); ++it) {
    YAML::Node key = it->first;
    if (!key.IsScalar()) fail(key, path, "expected a key name, got " + describe_node(key));
    YAML::Node value = it->second;
    out.emplace_back(key, value);
    // The view points into the node's scalar, which `out` keeps alive.
    auto [at, fresh] = first.emplace(out.back().first.Scalar(), out.size() - 1);
    if (!fresh)
      fail(key, join(path, key.Scalar()),
           "duplicate key (first given at line " +
               std::to_string(out[at->second].first.Mark().line + 1) + ")");
  }
  return out;
}

namespace {

// Why ExpandedSize stopped the parser, and where.
struct Refused {
  YAML::Mark mark;
  std::string message;
};

// Walks the first document's events (yaml-cpp's event parser: no tree is
// built, no alias followed) and measures what the tree would be: its node
// count and its depth with every alias expanded, each anchor's size and
// height remembered once its node closes. An alias to a node that is still
// open is a cycle. Depth and cycles stop the parser at once (throwing
// Refused) before its own recursion goes deeper; the count saturates at the
// limit and is judged at the end.
class ExpandedSize : public YAML::EventHandler {
 public:
  ExpandedSize(int64_t limit, int max_depth) : limit_(limit), max_depth_(max_depth) {}
  bool over() const { return over_; }
  YAML::Mark where() const { return where_; }

  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& m, YAML::anchor_t a) override { leaf(m, a, {1, 1}); }
  void OnAlias(const YAML::Mark& m, YAML::anchor_t a) override {
    if (std::find(open_anchors_.begin(), open_anchors_.end(), a) != open_anchors_.end())
      throw Refused{m,
                    "this alias names a node that contains it (a cycle): the document would be "
                    "infinitely deep"};
    auto it = sizes_.find(a);
    const Size s = it == sizes_.end() ? Size{1, 1} : it->second;
    if (static_cast<int64_t>(open_.size()) + s.height > max_depth_)
      throw Refused{m, "this alias nests the document more than " + std::to_string(max_depth_) +
                           " levels deep once expanded"};
    leaf(m, 0, s);
  }
  void OnScalar(const YAML::Mark& m, const std::string&, YAML::anchor_t a,
                const std::string&) override {
    leaf(m, a, {1, 1});
  }
  void OnSequenceStart(const YAML::Mark& m, const std::string&, YAML::anchor_t a,
                       YAML::EmitterStyle::value) override {
    open(m, a);
  }
  void OnSequenceEnd() override { close(); }
  void OnMapStart(const YAML::Mark& m, const std::string&, YAML::anchor_t a,
                  YAML::EmitterStyle::value) override {
    open(m, a);
  }
  void OnMapEnd() override { close(); }

 private:
  struct Size {
    int64_t nodes;
    int64_t height;  // levels, the node's own included
  };
  struct Open {
    YAML::Mark mark;
    YAML::anchor_t anchor;
    Size size;
  };
  void open(const YAML::Mark& m, YAML::anchor_t a) {
    if (static_cast<int64_t>(open_.size()) + 1 > max_depth_)
      throw Refused{m, "collections nest more than " + std::to_string(max_depth_) + " levels deep"};
    open_.push_back({m, a, {1, 1}});
    if (a) open_anchors_.push_back(a);
  }
  void leaf(const YAML::Mark& m, YAML::anchor_t a, Size size) {
    if (a) sizes_[a] = size;
    add(m, size);
  }
  void close() {
    Open o = open_.back();
    open_.pop_back();
    if (o.anchor) {
      open_anchors_.pop_back();
      sizes_[o.anchor] = o.size;
    }
    add(o.mark, o.size);
  }
  // Sizes saturate at the limit, so no sum can overflow.
  void add(const YAML::Mark& m, Size size) {
    int64_t& into = open_.empty() ? total_ : open_.back().size.nodes;
    into = std::min(limit_ + 1, into + std::min(size.nodes, limit_ + 1));
    if (!open_.empty())
      open_.back().size.height = std::max(open_.back().size.height, size.height + 1);
    if (into > limit_ && !over_) {
      over_ = true;
      where_ = m;
    }
  }
  int64_t limit_, total_ = 0;
  int max_depth_;
  std::vector<Open> open_;
  std::vector<YAML::anchor_t> open_anchors_;  // anchors of open_'s nodes, outermost first
  std::unordered_map<YAML::anchor_t, Size> sizes_;
  bool over_ = false;
  YAML::Mark where_;
};

}  // namespace

YAML::Node YamlReader::load(const std::string& text) const {
  if (text.size() > kMaxYamlBytes)
    throw SpecError(SpecLocation{file_, 1, 1}, "",
                    "the document is " + std::to_string(text.size()) + " bytes; at most " +
                        std::to_string(kMaxYamlBytes) + " are accepted");
  try {
    std::istringstream in(text);
    YAML::Parser parser(in);
    ExpandedSize count(kMaxYamlNodes, kMaxYamlDepth);
    try {
      parser.HandleNextDocument(count);
    } catch (const Refused& r) {
      throw SpecError(where(r.mark), "", r.message);
    }
    if (count.over())
      throw SpecError(where(count.where()), "",
                      "the document stands for more than " + std::to_string(kMaxYamlNodes) +
                          " nodes once its aliases are expanded (an alias bomb?)");
    return YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw SpecError(where(e.mark), "", "YAML syntax error: " + e.msg);
  }
}

}  // namespace dnnlab::spec::detail
