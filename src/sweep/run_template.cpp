// Placeholder scanning and line-preserving substitution (see run_template.hpp).
#include "sweep/run_template.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>

#include "spec/run_spec.hpp"
#include "spec/yaml_reader.hpp"
#include "sweep/sweep_spec.hpp"

namespace dnnlab::sweep {
namespace {

bool valid_name(std::string_view s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

std::string double_text(double v) {
  char buf[40];
  auto res = std::to_chars(buf, buf + sizeof buf, v);
  std::string s(buf, res.ptr);
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";  // stays a float in YAML
  return s;
}

}  // namespace

std::string mask_placeholders(const std::string& text, std::vector<size_t>* offsets) {
  std::string out = text;
  for (size_t at = out.find("${"); at != std::string::npos; at = out.find("${", at + 2)) {
    size_t close = out.find('}', at);
    if (close == std::string::npos) break;
    if (!valid_name(std::string_view(out).substr(at + 2, close - at - 2))) continue;
    out[at + 1] = '(';
    out[close] = ')';
    offsets->push_back(at);
  }
  return out;
}

std::string value_text(const nlohmann::json& v, char quote, bool whole) {
  std::string raw;
  if (v.is_string()) {
    raw = v.get<std::string>();
    if (whole) return spec::detail::yaml_string(raw);
  } else if (v.is_boolean()) {
    raw = v.get<bool>() ? "true" : "false";
  } else if (v.is_number_integer()) {
    raw = v.dump();
  } else if (v.is_number_float()) {
    raw = double_text(v.get<double>());
  } else if (v.is_null()) {
    raw = "null";
  } else {
    raw = v.dump();
  }
  if (quote == '"') {
    std::string q;
    for (char c : raw) {
      if (c == '"' || c == '\\') q += '\\';
      q += c;
    }
    return q;
  }
  if (quote == '\'') {
    std::string q;
    for (char c : raw) {
      if (c == '\'') q += '\'';
      q += c;
    }
    return q;
  }
  return raw;
}

RunTemplate::RunTemplate(const std::string& text, const std::vector<size_t>& masked,
                         const YAML::Node& root, const YAML::Node& node, const std::string& file)
    : file_(file) {
  spec::detail::YamlReader r(file);
  // The template runs from its node to the next top-level key after it.
  size_t begin = std::min<size_t>(static_cast<size_t>(std::max(0, node.Mark().pos)), text.size());
  size_t end = text.size();
  for (auto it = root.begin(); it != root.end(); ++it) {
    int p = it->first.Mark().pos;
    if (p > static_cast<int>(begin) && static_cast<size_t>(p) < end) end = static_cast<size_t>(p);
  }
  text_ = text.substr(0, end);
  for (size_t i = 0; i < begin; ++i)
    if (text_[i] != '\n' && text_[i] != '\r') text_[i] = ' ';

  std::vector<size_t> line_starts{0};
  for (size_t i = 0; i < text_.size(); ++i)
    if (text_[i] == '\n') line_starts.push_back(i + 1);
  auto locate = [&](size_t offset) {
    size_t line = std::upper_bound(line_starts.begin(), line_starts.end(), offset) -
                  line_starts.begin();  // 1-based
    return SpecLocation{file, static_cast<int>(line),
                        static_cast<int>(offset - line_starts[line - 1] + 1)};
  };

  // Walk the scalars in document order; find each placeholder of a scalar in
  // the text from the scalar's start on.
  auto scan = [&](auto&& self, const YAML::Node& n, const std::string& path) -> void {
    if (n.IsMap()) {
      for (auto it = n.begin(); it != n.end(); ++it) {
        const std::string key = it->first.Scalar();
        if (key.find("${") != std::string::npos || key.find("$(") != std::string::npos)
          r.fail(it->first, spec::detail::join(path, key),
                 "placeholders may stand for values, not keys");
        self(self, it->second, spec::detail::join(path, key));
      }
    } else if (n.IsSequence()) {
      for (size_t i = 0; i < n.size(); ++i) self(self, n[i], path + "[" + std::to_string(i) + "]");
    } else if (n.IsScalar()) {
      const std::string& s = n.Scalar();
      size_t start = static_cast<size_t>(std::max(0, n.Mark().pos));
      char quote =
          start < text_.size() && (text_[start] == '"' || text_[start] == '\'') ? text_[start] : 0;
      size_t cursor = start;
      for (size_t at = s.find('$'); at != std::string::npos; at = s.find('$', at + 1)) {
        if (s.compare(at, 2, "${") == 0)  // what masking left is malformed
          r.fail(n, path,
                 "malformed placeholder in '" + s +
                     "': write ${name} with a name of letters, digits and '_'");
        if (s.compare(at, 2, "$(") != 0) continue;
        size_t close = s.find(')', at);
        if (close == std::string::npos) continue;
        std::string name = s.substr(at + 2, close - at - 2);
        const std::string token = "$(" + name + ")";
        size_t pos = text_.find(token, cursor);
        if (pos == std::string::npos) continue;
        cursor = pos + token.size();
        if (!std::binary_search(masked.begin(), masked.end(), pos)) continue;  // literal "$(x)"
        Placeholder p;
        p.name = name;
        p.offset = pos;
        p.length = token.size();
        p.quote = quote;
        p.whole_scalar = quote == 0 && s == token;
        p.where = locate(pos);
        p.field = path;
        placeholders_.push_back(std::move(p));
      }
    }
  };
  scan(scan, node, "template");
  std::sort(placeholders_.begin(), placeholders_.end(),
            [](const Placeholder& a, const Placeholder& b) { return a.offset < b.offset; });
  find_variants(node, file);
}

void RunTemplate::find_variants(const YAML::Node& node, const std::string& file) {
  spec::detail::YamlReader r(file);
  std::optional<YAML::Node> models_key, models, model_key;
  size_t region_end = text_.size();
  for (auto it = node.begin(); it != node.end(); ++it)
    if (it->first.Scalar() == "models") {
      models_key = it->first;
      models = it->second;
    } else if (it->first.Scalar() == "model") {
      model_key = it->first;
    }
  if (!models) return;
  const auto pos = [](const YAML::Node& n) {
    return static_cast<size_t>(std::max(0, n.Mark().pos));
  };
  for (auto it = node.begin(); it != node.end(); ++it)
    if (pos(it->first) > pos(*models_key)) region_end = std::min(region_end, pos(it->first));

  const Placeholder* selector = nullptr;
  for (const Placeholder& p : placeholders_)
    if (p.field == "template.model" && p.whole_scalar) selector = &p;
  if (!model_key || !selector)
    r.fail(*models_key, "template.models",
           "model variants need 'model: ${param}' in the template: the parameter whose value "
           "names the variant each trial trains (docs/sweep.md, \"Model variants\")");
  if (!models->IsMap() || models->size() == 0)
    r.fail(*models, "template.models",
           "expected a map of model variants (name: model spec), got " +
               spec::detail::describe_node(*models));
  if (models->Style() == YAML::EmitterStyle::Flow)
    r.fail(*models, "template.models",
           "write the model variants as a block map, one 'name:' per line");
  const size_t at = pos(*models_key);
  if (text_.compare(at, 7, "models:") != 0)
    r.fail(*models_key, "template.models", "write the key as plain 'models:'");

  ModelVariants v;
  v.selector = selector->name;
  v.where = r.where(*models_key);
  v.rename_at = at;
  std::vector<size_t> starts;
  for (auto it = models->begin(); it != models->end(); ++it) {
    const std::string name = it->first.Scalar();
    if (!valid_name(name))
      r.fail(it->first, "template.models." + name,
             "a model variant's name is letters, digits and '_'");
    if (!it->second.IsMap())
      r.fail(it->second, "template.models." + name,
             "expected a model spec (a map with layers), got " +
                 spec::detail::describe_node(it->second));
    v.names.push_back(name);
    starts.push_back(pos(it->first));
  }
  // `model: ${param}` is replaced by the chosen variant, never substituted.
  const ModelVariants::Span model_entry{pos(*model_key), selector->offset + selector->length};
  for (size_t i = 0; i < starts.size(); ++i) {
    std::vector<ModelVariants::Span> spans{model_entry};
    for (size_t j = 0; j < starts.size(); ++j) {
      if (j == i) {  // the key only: its spec stays, indented under `model`
        size_t colon = text_.find(':', starts[j] + v.names[j].size());
        spans.push_back({starts[j], colon + 1});
      } else {
        spans.push_back({starts[j], j + 1 < starts.size() ? starts[j + 1] : region_end});
      }
    }
    v.blanked.push_back(std::move(spans));
  }
  variants_ = std::move(v);
}

std::string RunTemplate::selected_text(const nlohmann::json& params, int* variant) const {
  *variant = -1;
  if (!variants_) return text_;
  const ModelVariants& v = *variants_;
  const Placeholder* selector = nullptr;
  for (const Placeholder& p : placeholders_)
    if (p.name == v.selector && p.field == "template.model") selector = &p;
  auto it = params.find(v.selector);
  if (it == params.end())
    throw SpecError(selector->where, selector->field,
                    "no value for placeholder ${" + v.selector + "}");
  const std::string name = it->is_string() ? it->get<std::string>() : it->dump();
  auto found = std::find(v.names.begin(), v.names.end(), name);
  if (!it->is_string() || found == v.names.end()) {
    std::string names;
    for (const std::string& n : v.names) names += (names.empty() ? "" : ", ") + n;
    throw SpecError(
        selector->where, selector->field,
        "${" + v.selector + "} = '" + name + "' names no model in template.models (" + names + ")");
  }
  *variant = static_cast<int>(found - v.names.begin());
  std::string text = text_;
  for (const ModelVariants::Span& s : v.blanked[*variant])
    for (size_t i = s.begin; i < s.end && i < text.size(); ++i)
      if (text[i] != '\n' && text[i] != '\r') text[i] = ' ';
  text.replace(v.rename_at, 7, "model :");
  return text;
}

bool RunTemplate::uses(const std::string& name) const {
  return std::any_of(placeholders_.begin(), placeholders_.end(),
                     [&](const Placeholder& p) { return p.name == name; });
}

std::string RunTemplate::substitute(const nlohmann::json& params) const {
  return substitute(params, nullptr);
}

std::string RunTemplate::substitute(const nlohmann::json& params, std::vector<Edit>* edits) const {
  int variant = -1;
  const std::string text = selected_text(params, &variant);
  auto blanked = [&](const Placeholder& p) {
    if (variant < 0) return false;
    const auto& spans = variants_->blanked[variant];
    return std::any_of(spans.begin(), spans.end(), [&](const ModelVariants::Span& s) {
      return p.offset >= s.begin && p.offset < s.end;
    });
  };
  std::string out;
  out.reserve(text.size() + 64);
  size_t copied = 0;
  for (const Placeholder& p : placeholders_) {
    if (blanked(p)) continue;  // in a variant this run does not train
    auto it = params.find(p.name);
    if (it == params.end())
      throw SpecError(p.where, p.field, "no value for placeholder ${" + p.name + "}");
    std::string v = value_text(*it, p.quote, p.whole_scalar);
    if (v.find_first_of("\r\n") != std::string::npos)
      throw SpecError(p.where, p.field, "the value of ${" + p.name + "} spans lines");
    out.append(text, copied, p.offset - copied);
    out += v;
    copied = p.offset + p.length;
    if (edits)
      edits->push_back(
          {p.where.line, p.where.column, static_cast<int>(p.length), static_cast<int>(v.size())});
  }
  out.append(text, copied, std::string::npos);
  return out;
}

SpecLocation RunTemplate::map_back(SpecLocation loc, const std::vector<Edit>& edits) const {
  loc.file = file_;
  if (loc.line <= 0) return loc;
  int shift = 0;  // original column - substituted column, before the current edit
  for (const Edit& e : edits) {
    if (e.line != loc.line) continue;
    int sub_start = e.column - shift;
    if (loc.column < sub_start) break;
    if (loc.column < sub_start + e.new_length) {
      loc.column = e.column;
      return loc;
    }
    shift += e.old_length - e.new_length;
  }
  loc.column += shift;
  return loc;
}

nn::RunSpec RunTemplate::instantiate(const nlohmann::json& params) const {
  std::vector<Edit> edits;
  std::string text = substitute(params, &edits);
  try {
    nn::RunSpec run = spec::parse_run_spec(text, file_);
    run.model.where = map_back(run.model.where, edits);
    for (nn::LayerSpec& l : run.model.layers) l.where = map_back(l.where, edits);
    return run;
  } catch (const SpecError& e) {
    std::string message = e.what();
    std::string prefix =
        e.where().str() + ": " + (e.field().empty() ? "" : "'" + e.field() + "': ");
    if (message.compare(0, prefix.size(), prefix) == 0) message.erase(0, prefix.size());
    std::string values = describe_params(params);
    std::string field = e.field();
    // The run's `model` is the chosen variant: name it as the file does.
    if (variants_ &&
        (field == "model" || field.starts_with("model.") || field.starts_with("model["))) {
      auto it = params.find(variants_->selector);
      if (it != params.end() && it->is_string())
        field = "models." + it->get<std::string>() + field.substr(5);
    }
    throw SpecError(map_back(e.where(), edits), field.empty() ? "template" : "template." + field,
                    (values.empty() ? "" : "with " + values + ": ") + message);
  }
}

}  // namespace dnnlab::sweep
