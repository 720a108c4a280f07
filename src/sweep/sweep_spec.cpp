// Sweep-file parsing and the checks that run before any trial (see sweep_spec.hpp).
#include "sweep/sweep_spec.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "nn/model.hpp"
#include "spec/run_spec.hpp"
#include "spec/yaml_reader.hpp"
#include "sweep/run_template.hpp"
#include "sweep/sampler.hpp"

namespace dnnlab::sweep {
namespace {

using spec::detail::Field;
using spec::detail::join;
using spec::detail::Range;
using spec::detail::YamlReader;

constexpr std::string_view kMethods[] = {"grid", "random", "tpe"};
constexpr std::string_view kMetrics[] = {"val_acc", "val_loss", "train_loss", "train_acc"};
constexpr std::string_view kModes[] = {"max", "min"};
constexpr std::string_view kSchedulers[] = {"fifo", "asha", "median"};
constexpr std::string_view kRangeKeys[] = {"int", "uniform", "loguniform", "step"};

// More template checks than this (a product over the model's parameters) is
// slow without finding more; beyond it each parameter is varied alone.
constexpr size_t kMaxCheckCombos = 256;
constexpr double kInf = 1e300;

bool is_quoted(const YAML::Node& n) {
  return n.Tag() == "!";
}

// A plain scalar as JSON: integer, float, boolean, else string. Quoted
// scalars are strings.
nlohmann::json scalar_json(const YAML::Node& n) {
  const std::string& s = n.Scalar();
  if (!is_quoted(n)) {
    std::string_view t = s;
    if (!t.empty() && t.front() == '+') t.remove_prefix(1);
    int64_t i = 0;
    auto ri = std::from_chars(t.data(), t.data() + t.size(), i);
    if (!t.empty() && ri.ec == std::errc() && ri.ptr == t.data() + t.size()) return i;
    double d = 0;
    auto rd = std::from_chars(t.data(), t.data() + t.size(), d);
    if (!t.empty() && rd.ec == std::errc() && rd.ptr == t.data() + t.size() && std::isfinite(d))
      return d;
    if (s == "true" || s == "True" || s == "TRUE") return true;
    if (s == "false" || s == "False" || s == "FALSE") return false;
  }
  return s;
}

double number(const YamlReader& r, const YAML::Node& n, const std::string& path) {
  if (n.IsScalar() && !is_quoted(n)) {
    nlohmann::json j = scalar_json(n);
    if (j.is_number()) return j.get<double>();
  }
  r.fail(n, path, "expected a number, got " + spec::detail::describe_node(n));
}

// [low, high]: two numbers, low < high.
std::pair<YAML::Node, YAML::Node> bounds(const YamlReader& r, const YAML::Node& n,
                                         const std::string& path) {
  if (!n.IsSequence() || n.size() != 2)
    r.fail(n, path, "expected [low, high], got " + spec::detail::describe_node(n));
  return {n[0], n[1]};
}

ParamSpec read_param(const YamlReader& r, const YAML::Node& key, const YAML::Node& v,
                     const std::string& path) {
  ParamSpec p;
  p.name = key.Scalar();
  p.where = r.where(key);
  if (v.IsSequence()) {
    p.kind = ParamKind::kChoice;
    if (v.size() == 0) r.fail(v, path, "the choice list is empty");
    for (size_t i = 0; i < v.size(); ++i) {
      const YAML::Node& c = v[i];
      std::string cp = path + "[" + std::to_string(i) + "]";
      if (!c.IsScalar())
        r.fail(c, cp, "a choice is a scalar, got " + spec::detail::describe_node(c));
      nlohmann::json j = scalar_json(c);
      if (j.is_string() && j.get<std::string>().find_first_of("\r\n") != std::string::npos)
        r.fail(c, cp, "a choice is one line");
      if (std::find(p.choices.begin(), p.choices.end(), j) != p.choices.end())
        r.fail(c, cp, "'" + c.Scalar() + "' is listed twice");
      p.choices.push_back(std::move(j));
    }
    return p;
  }
  if (!v.IsMap())
    r.fail(v, path,
           "expected a choice list [a, b, ...] or a range {int|uniform|loguniform: [low, high]}, "
           "got " +
               spec::detail::describe_node(v));
  // Optional nodes: a default YAML::Node reads as defined (null).
  std::optional<YAML::Node> range, step_node;
  std::string kind;
  for (const auto& [k, val] : r.entries(v, path)) {
    const std::string& name = k.Scalar();
    if (name == "step") {
      step_node = val;
      continue;
    }
    if (name != "int" && name != "uniform" && name != "loguniform")
      r.fail(k, join(path, name), spec::detail::unknown_key_message(name, path, kRangeKeys));
    if (!kind.empty())
      r.fail(k, join(path, name), "a range has one kind; '" + kind + "' is already given");
    kind = name;
    range = val;
  }
  if (kind.empty()) r.fail(v, path, "a range needs one of int, uniform, loguniform");
  const std::string rpath = join(path, kind);
  auto [lo, hi] = bounds(r, *range, rpath);
  if (kind == "int") {
    p.kind = ParamKind::kInt;
    Range any{-kInf, kInf};
    p.int_low = r.integer(lo, rpath + "[0]", any);
    p.int_high = r.integer(hi, rpath + "[1]", any);
    if (p.int_low >= p.int_high)
      r.fail(
          *range, rpath,
          "low " + std::to_string(p.int_low) + " must be below high " + std::to_string(p.int_high));
    if (step_node) {
      p.step = r.integer(*step_node, join(path, "step"), any);
      if (p.step < 1) r.fail(*step_node, join(path, "step"), "the step must be >= 1");
    }
    p.low = static_cast<double>(p.int_low);
    p.high = static_cast<double>(p.int_high);
    return p;
  }
  if (step_node) r.fail(*step_node, join(path, "step"), "'step' applies only to int ranges");
  p.kind = kind == "uniform" ? ParamKind::kUniform : ParamKind::kLogUniform;
  p.low = number(r, lo, rpath + "[0]");
  p.high = number(r, hi, rpath + "[1]");
  if (!(p.low < p.high))
    r.fail(*range, rpath, "low " + lo.Scalar() + " must be below high " + hi.Scalar());
  if (p.kind == ParamKind::kLogUniform && p.low <= 0)
    r.fail(lo, rpath + "[0]", "a loguniform range needs low > 0, got " + lo.Scalar());
  return p;
}

struct SearchSection {
  SearchSpec spec;
  std::optional<YAML::Node> mode_node, budget_node, metric_node;
};

constexpr Field<SearchSection> kSearchFields[] = {
    {"method", [](const YamlReader& r, const YAML::Node& v, const std::string& p,
                  SearchSection& s) { s.spec.method = r.choice(v, p, "search method", kMethods); }},
    {"budget",
     [](const YamlReader& r, const YAML::Node& v, const std::string& p, SearchSection& s) {
       s.spec.budget = r.integer(v, p, Range{0, 1e12});
       s.budget_node = v;
     }},
    {"seed", [](const YamlReader& r, const YAML::Node& v, const std::string& p,
                SearchSection& s) { s.spec.seed = r.unsigned_integer(v, p); }},
    {"max_concurrent",
     [](const YamlReader& r, const YAML::Node& v, const std::string& p, SearchSection& s) {
       s.spec.max_concurrent = r.integer(v, p, Range{0, 1e9});
     }},
    {"metric",
     [](const YamlReader& r, const YAML::Node& v, const std::string& p, SearchSection& s) {
       s.spec.metric = r.choice(v, p, "metric", kMetrics);
       s.metric_node = v;
     }},
    {"mode",
     [](const YamlReader& r, const YAML::Node& v, const std::string& p, SearchSection& s) {
       s.spec.mode = r.choice(v, p, "mode", kModes);
       s.mode_node = v;
     }},
    {"n_startup",
     [](const YamlReader& r, const YAML::Node& v, const std::string& p, SearchSection& s) {
       s.spec.n_startup = r.integer(v, p, Range{1, 1e9});
     }},
    {"n_ei_candidates",
     [](const YamlReader& r, const YAML::Node& v, const std::string& p, SearchSection& s) {
       s.spec.n_ei_candidates = r.integer(v, p, Range{1, 1e6});
     }},
    {"keep_weights",
     [](const YamlReader& r, const YAML::Node& v, const std::string& p, SearchSection& s) {
       s.spec.keep_weights = r.integer(v, p, Range{0, 1000});
     }},
    {"parameters",
     [](const YamlReader& r, const YAML::Node& v, const std::string& p, SearchSection& s) {
       for (const auto& [key, value] : r.entries(v, p)) {
         const std::string& name = key.Scalar();
         bool ok =
             !name.empty() && (std::isalpha(static_cast<unsigned char>(name[0])) || name[0] == '_');
         for (char c : name) ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '_');
         if (!ok) r.fail(key, join(p, name), "a parameter name is letters, digits and '_'");
         s.spec.parameters.push_back(read_param(r, key, value, join(p, name)));
       }
     }},
};

constexpr Field<SchedulerSpec> kSchedulerFields[] = {
    {"type", [](const YamlReader& r, const YAML::Node& v, const std::string& p,
                SchedulerSpec& s) { s.type = r.choice(v, p, "scheduler", kSchedulers); }},
    {"min_epochs",
     [](const YamlReader& r, const YAML::Node& v, const std::string& p, SchedulerSpec& s) {
       s.min_epochs = r.integer(v, p, Range{1, 1e9});
     },
     nullptr, "asha"},
    {"reduction_factor",
     [](const YamlReader& r, const YAML::Node& v, const std::string& p, SchedulerSpec& s) {
       s.reduction_factor = r.integer(v, p, Range{2, 1e9});
     },
     nullptr, "asha"},
    {"grace_epochs",
     [](const YamlReader& r, const YAML::Node& v, const std::string& p, SchedulerSpec& s) {
       s.grace_epochs = r.integer(v, p, Range{1, 1e9});
     },
     nullptr, "median"},
};

struct TopSection {
  std::string name;
  std::optional<YAML::Node> name_node, template_node, search_node, scheduler_node;
};

constexpr Field<TopSection> kTopFields[] = {
    {"name",
     [](const YamlReader& r, const YAML::Node& v, const std::string& p, TopSection& t) {
       t.name = r.string(v, p);
       t.name_node = v;
       bool ok = !t.name.empty() && t.name.size() <= 150;
       for (char c : t.name)
         ok = ok &&
              (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.');
       if (!ok) r.fail(v, p, "a sweep name is 1-150 letters, digits, '_', '-' or '.'");
     }},
    {"template",
     [](const YamlReader& r, const YAML::Node& v, const std::string& p, TopSection& t) {
       if (!v.IsMap())
         r.fail(v, p, "expected a run spec (a map), got " + spec::detail::describe_node(v));
       t.template_node = v;
     }},
    {"search", [](const YamlReader& r, const YAML::Node& v, const std::string& p,
                  TopSection& t) { t.search_node = v; }},
    {"scheduler", [](const YamlReader& r, const YAML::Node& v, const std::string& p,
                     TopSection& t) { t.scheduler_node = v; }},
};

std::string stem_name(const std::string& file) {
  std::string s = std::filesystem::path(file).stem().string();
  std::string out;
  for (char c : s)
    out +=
        std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' ? c : '-';
  return out.empty() ? "sweep" : out.substr(0, 150);
}

// The parameter combinations the template is checked with: the product of
// the model parameters' check values (or each varied alone beyond the cap),
// then each other parameter varied alone.
std::vector<nlohmann::json> check_combos(const SearchSpec& s) {
  nlohmann::json base = nlohmann::json::object();
  for (const ParamSpec& p : s.parameters) base[p.name] = p.check_values().front();
  std::vector<nlohmann::json> combos;
  size_t product = 1;
  for (const ParamSpec& p : s.parameters)
    if (p.in_model) product = std::min(product * p.check_values().size(), kMaxCheckCombos + 1);
  if (product <= kMaxCheckCombos) {
    combos.push_back(base);
    for (const ParamSpec& p : s.parameters) {
      if (!p.in_model) continue;
      std::vector<nlohmann::json> grown;
      for (const nlohmann::json& c : combos)
        for (const nlohmann::json& v : p.check_values()) {
          nlohmann::json n = c;
          n[p.name] = v;
          grown.push_back(std::move(n));
        }
      combos = std::move(grown);
    }
  } else {
    combos.push_back(base);
  }
  for (const ParamSpec& p : s.parameters) {
    if (p.in_model && product <= kMaxCheckCombos) continue;
    auto values = p.check_values();
    for (size_t i = 1; i < values.size(); ++i) {
      nlohmann::json n = base;
      n[p.name] = values[i];
      combos.push_back(std::move(n));
    }
  }
  return combos;
}

}  // namespace

std::vector<nlohmann::json> ParamSpec::grid_values() const {
  if (kind == ParamKind::kChoice) return choices;
  std::vector<nlohmann::json> out;
  if (kind == ParamKind::kInt && step > 0)
    for (int64_t v = int_low; v <= int_high; v += step) out.emplace_back(v);
  return out;
}

std::vector<nlohmann::json> ParamSpec::check_values() const {
  switch (kind) {
    case ParamKind::kChoice:
      return choices;
    case ParamKind::kInt: {
      int64_t s = std::max<int64_t>(step, 1);
      return {int_low, int_low + (int_high - int_low) / s * s};
    }
    case ParamKind::kUniform:
    case ParamKind::kLogUniform:
      return {low, high};
  }
  return {};
}

const ParamSpec* SearchSpec::find(const std::string& n) const {
  for (const ParamSpec& p : parameters)
    if (p.name == n) return &p;
  return nullptr;
}

std::string describe_params(const nlohmann::json& params) {
  std::string s;
  if (!params.is_object()) return s;
  for (auto it = params.begin(); it != params.end(); ++it) {
    if (!s.empty()) s += ", ";
    s += it.key() + "=" + value_text(it.value(), 0, true);
  }
  return s;
}

nn::RunSpec SweepSpec::instantiate(const nlohmann::json& params) const {
  return template_->instantiate(params);
}

nn::RunSpec SweepSpec::materialize(const TrialConfig& trial) const {
  for (const ParamSpec& p : search.parameters)
    if (!trial.params.contains(p.name))
      throw std::invalid_argument("trial " + std::to_string(trial.index) + " has no value for '" +
                                  p.name + "'");
  nn::RunSpec run = template_->instantiate(trial.params);
  run.name = name + "-" + std::to_string(trial.index);
  run.train.seed = trial.seed;
  return run;
}

namespace {

// The YAML parser sees ${name} as $(name) (mask_placeholders); an error
// quoting the masked text shows what the user wrote instead.
std::string unmask(std::string s, const std::string& text) {
  std::vector<size_t> at;
  const std::string masked = mask_placeholders(text, &at);
  std::vector<std::string> tokens;
  for (size_t a : at) tokens.push_back(masked.substr(a, masked.find(')', a) + 1 - a));
  for (const std::string& token : tokens) {
    const std::string original = "${" + token.substr(2, token.size() - 3) + "}";
    for (size_t i = s.find(token); i != std::string::npos; i = s.find(token, i + original.size()))
      s.replace(i, token.size(), original);
  }
  return s;
}

// `model: ${family}` over `template.models`: the parameter lists variants'
// names. A variant no choice names is allowed (narrowing a study to one
// family is a one-word edit), and is still checked: not parsed.
void check_variants(const ModelVariants& mv, const SearchSpec& s) {
  const ParamSpec* p = s.find(mv.selector);
  std::string names;
  for (const std::string& n : mv.names) names += (names.empty() ? "" : ", ") + n;
  const std::string field = "search.parameters." + mv.selector;
  if (p->kind != ParamKind::kChoice)
    throw SpecError(p->where, field,
                    "'" + mv.selector +
                        "' chooses the model (template.model): give it a choice list of "
                        "template.models' names (" +
                        names + ")");
  for (const nlohmann::json& c : p->choices)
    if (!c.is_string() ||
        std::find(mv.names.begin(), mv.names.end(), c.get<std::string>()) == mv.names.end())
      throw SpecError(p->where, field,
                      "'" + (c.is_string() ? c.get<std::string>() : c.dump()) +
                          "' names no model in template.models (" + names + ")");
}

}  // namespace

SweepSpec parse_sweep(const std::string& text, const std::string& file) try {
  YamlReader r(file);
  std::vector<size_t> masked_at;
  const std::string masked = mask_placeholders(text, &masked_at);
  YAML::Node root = r.load(masked);
  try {
    if (!root.IsMap())
      r.fail(root, "", "a sweep file is a map with name, template, search and scheduler");
    TopSection top;
    spec::detail::read_fields(r, root, "", kTopFields, top);
    if (!top.template_node)
      r.fail(root, "template", "missing 'template:' (the run spec each trial starts from)");
    if (!top.search_node) r.fail(root, "search", "missing 'search:' (method and parameters)");

    SweepSpec sweep;
    sweep.file = file;
    sweep.source = text;
    sweep.name = top.name_node ? top.name : stem_name(file);

    SearchSection search;
    spec::detail::read_fields(r, *top.search_node, "search", kSearchFields, search);
    sweep.search = std::move(search.spec);
    SearchSpec& s = sweep.search;
    s.where = r.where(*top.search_node);
    if (!search.mode_node) s.mode = s.metric.ends_with("_loss") ? "min" : "max";
    if (s.method != "grid" && s.budget == 0)
      r.fail(search.budget_node ? *search.budget_node : *top.search_node, "search.budget",
             s.method + " search needs a budget (the number of trials) > 0");
    if (s.method == "grid")
      for (const ParamSpec& p : s.parameters)
        if (!p.griddable())
          throw SpecError(p.where, "search.parameters." + p.name,
                          "grid search enumerates choice lists and int ranges with a step; '" +
                              p.name + "' is " +
                              (p.kind == ParamKind::kInt ? "an int range without a step"
                                                         : "a continuous range") +
                              " (give it a step or choices, or use method random or tpe)");

    if (top.scheduler_node) {
      spec::detail::read_fields(r, *top.scheduler_node, "scheduler", kSchedulerFields,
                                sweep.scheduler);
      sweep.scheduler.where = r.where(*top.scheduler_node);
    }

    auto tmpl = std::make_shared<RunTemplate>(masked, masked_at, root, *top.template_node, file);
    for (const Placeholder& ph : tmpl->placeholders()) {
      ParamSpec* p = nullptr;
      for (ParamSpec& q : s.parameters)
        if (q.name == ph.name) p = &q;
      if (!p) {
        std::vector<std::string_view> names;
        for (const ParamSpec& q : s.parameters) names.push_back(q.name);
        std::string hint =
            names.empty() ? "(search.parameters is empty)" : spec::detail::suggest(ph.name, names);
        throw SpecError(ph.where, ph.field,
                        "placeholder ${" + ph.name + "} at line " + std::to_string(ph.where.line) +
                            ", column " + std::to_string(ph.where.column) +
                            " has no parameter in search.parameters; " + hint);
      }
      if (ph.field.starts_with("template.model")) p->in_model = true;
    }
    for (const ParamSpec& p : s.parameters)
      if (!tmpl->uses(p.name))
        throw SpecError(
            p.where, "search.parameters." + p.name,
            "parameter '" + p.name + "' is never used: the template has no ${" + p.name + "}");
    if (const ModelVariants* mv = tmpl->variants()) check_variants(*mv, s);
    sweep.template_ = std::move(tmpl);

    // Every run-spec check, for every choice of the model's parameters.
    for (const nlohmann::json& combo : check_combos(s)) {
      nn::RunSpec run = sweep.instantiate(combo);
      sweep.max_epochs = std::max<int64_t>(sweep.max_epochs, run.train.epochs);
      // No validation data, no val_* values: nothing to search (or stop) by.
      if (run.data.validation == 0 && s.metric.starts_with("val_"))
        throw SpecError(
            search.metric_node ? r.where(*search.metric_node) : s.where, "search.metric",
            "'" + s.metric + "' needs validation data, but template.data.validation is 0" +
                (combo.empty() ? std::string() : " (with " + describe_params(combo) + ")") +
                (search.metric_node ? "" : " (val_acc is the default metric)") +
                ": hold out validation samples, or search by train_loss or train_acc" +
                (sweep.scheduler.type == "fifo" ? "" : " (the scheduler uses it too)"));
    }
    return sweep;
  } catch (const YAML::Exception& e) {
    throw SpecError(r.where(e.mark), "", e.msg);
  }
} catch (const SpecError& e) {
  const std::string what = e.what();
  const std::string prefix = SpecError(e.where(), e.field(), "").what();
  const std::string message = what.substr(std::min(prefix.size(), what.size()));
  const std::string unmasked = unmask(message, text), field = unmask(e.field(), text);
  if (unmasked == message && field == e.field()) throw;
  throw SpecError(e.where(), field, unmasked);
}

LargestTrial largest_trial(const SweepSpec& sweep) {
  // Every parameter as if it shaped the model: a wide model and a large
  // batch given by different parameters meet in one trial.
  SearchSpec all = sweep.search;
  for (ParamSpec& p : all.parameters) p.in_model = true;
  LargestTrial largest;
  for (const nlohmann::json& combo : check_combos(all)) {
    const nn::RunSpec run = sweep.instantiate(combo);
    nn::Shape sample;
    spec::data_shape(run.data, &sample, nullptr);
    const nn::MemoryEstimate m =
        nn::Model::estimate_memory(run.model, nn::model_input(run.model, sample), run.train);
    if (largest.params.is_null() || m.total() > largest.memory.total())
      largest = {m, combo, run.train.batch_size};
  }
  return largest;
}

SweepSpec load_sweep(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw SpecError(SpecLocation{path, 0, 0}, "", "is a directory, not a sweep file");
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw SpecError(SpecLocation{path, 0, 0}, "",
                    "cannot open sweep file '" + path + "': " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad())
    throw SpecError(SpecLocation{path, 0, 0}, "", "cannot read sweep file '" + path + "'");
  return parse_sweep(text.str(), path);
}

}  // namespace dnnlab::sweep
