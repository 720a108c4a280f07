// The run-spec template of a sweep file and the ${param} placeholders in it.
// Substitution works on the sweep file's own text: everything outside the
// `template:` value is blanked (newlines kept), so the run-spec parser sees a
// document whose lines and columns are the sweep file's, and its errors point
// into the sweep file. Columns after a substituted value on the same line are
// mapped back through the recorded edits.
#pragma once
#include <yaml-cpp/yaml.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "nn/errors.hpp"
#include "nn/spec.hpp"

namespace dnnlab::sweep {

struct Placeholder {
  std::string name;
  size_t offset = 0;  // of "${" in the text
  size_t length = 0;  // of "${name}"
  char quote = 0;     // the enclosing scalar's quote: 0, '"' or '\''
  bool whole_scalar =
      false;           // a plain scalar that is only the placeholder: the value keeps its type
  SpecLocation where;  // of "${"
  std::string field;   // dotted path of the scalar, e.g. "template.model.layers[0].dense"
};

// `template.models` (name -> model spec) with `template.model: ${param}`:
// each trial trains the model its parameter's value names. The variants are
// selected on the text, like placeholders: `models` becomes `model` and every
// other variant (and the chosen one's key) is blanked, so the run-spec
// parser's locations still point into the sweep file.
struct ModelVariants {
  std::string selector;            // the parameter whose value names the variant
  SpecLocation where;              // of the `models` key
  std::vector<std::string> names;  // in file order
  struct Span {
    size_t begin, end;  // [begin, end) of the masked text, blanked
  };
  std::vector<std::vector<Span>> blanked;  // per variant: what its runs do not see
  size_t rename_at = 0;                    // the `models` key: `models` -> `model `
};

class RunTemplate {
 public:
  // `root` is the parsed (masked) sweep file and `node` its `template:` value.
  // Malformed placeholders are SpecErrors.
  // `text` is the masked text (see mask_placeholders) and `masked` the offsets
  // it returned.
  RunTemplate(const std::string& text, const std::vector<size_t>& masked, const YAML::Node& root,
              const YAML::Node& node, const std::string& file);

  const std::vector<Placeholder>& placeholders() const { return placeholders_; }
  bool uses(const std::string& name) const;
  // Set when the template has `models:` (see ModelVariants).
  const ModelVariants* variants() const { return variants_ ? &*variants_ : nullptr; }

  // Substitutes `params` (an object: name -> scalar) and parses the result
  // as a run spec. SpecErrors come back with sweep-file locations, the field
  // prefixed by "template." and the message prefixed by the values.
  nn::RunSpec instantiate(const nlohmann::json& params) const;
  // The substituted text (for provenance and tests).
  std::string substitute(const nlohmann::json& params) const;

 private:
  struct Edit {
    int line;        // 1-based
    int column;      // 1-based, in the original text
    int old_length;  // bytes
    int new_length;
  };
  std::string substitute(const nlohmann::json& params, std::vector<Edit>* edits) const;
  SpecLocation map_back(SpecLocation loc, const std::vector<Edit>& edits) const;

  std::string text_;  // the sweep file with everything outside the template blanked
  std::string file_;
  std::vector<Placeholder> placeholders_;  // in text order
  std::optional<ModelVariants> variants_;
  // The text a run with `params` starts from (variants selected); `variant`
  // gets the chosen one's index, or -1 without variants.
  std::string selected_text(const nlohmann::json& params, int* variant) const;
  void find_variants(const YAML::Node& node, const std::string& file);
};

// `{` and `}` end a plain scalar in YAML's flow style, so `lr: ${lr}` inside
// `{...}` would not parse: before the YAML parser sees the text, every
// well-formed ${name} becomes $(name) (same length, so lines and columns stay).
// Returns the masked text; `offsets` gets where each one starts.
std::string mask_placeholders(const std::string& text, std::vector<size_t>* offsets);

// A placeholder's value as YAML text: `quote` = 0 and `whole` for a value
// that keeps its type (4, 0.01, true, "1" quoted as a string), otherwise the
// raw text escaped for the enclosing quotes.
std::string value_text(const nlohmann::json& v, char quote, bool whole);

}  // namespace dnnlab::sweep
