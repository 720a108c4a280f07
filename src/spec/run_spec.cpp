// Run specs from YAML: one table of fields per section, cross-field checks,
// then nn::Model::validate for the shapes. The format is in docs/spec.md.
#include "spec/run_spec.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <new>
#include <optional>
#include <sstream>
#include <utility>
#include <vector>

#include "data/dataset.hpp"
#include "nn/model.hpp"
#include "nn/registry.hpp"
#include "spec/data_section.hpp"
#include "spec/layer_list.hpp"
#include "spec/yaml_reader.hpp"

namespace dnnlab::spec {
namespace {

using detail::DataFacts;
using detail::Field;
using detail::find_node;
using detail::has_key;
using detail::Range;
using detail::YamlReader;

constexpr double kInf = std::numeric_limits<double>::infinity();

std::string str(int64_t v) {
  return std::to_string(v);
}
std::string str(float v) {
  return detail::yaml_float(v);
}
std::string str(bool v) {
  return v ? "true" : "false";
}

// ---- model -----------------------------------------------------------------

// The model section while it is read: the spec and each layer's entry path.
struct ModelSection {
  nn::ModelSpec spec;
  std::vector<std::string> layer_paths;
};

constexpr Field<ModelSection> kModelFields[] = {
    {"input",
     [](const YamlReader& r, const YAML::Node& v, const std::string& p, ModelSection& m) {
       if (!v.IsSequence() || v.size() < 1 || v.size() > nn::kMaxRank - 1)
         r.fail(v, p,
                "expected a list of 1 to " + std::to_string(nn::kMaxRank - 1) +
                    " dimensions like [784], got " + detail::describe_node(v));
       m.spec.input.clear();
       for (size_t i = 0; i < v.size(); ++i)
         m.spec.input.push_back(r.integer(v[i], p + "[" + std::to_string(i) + "]", {1, 1e8}));
     },
     [](const ModelSection& m) {
       if (m.spec.input.empty()) return std::string();
       std::string s = "[";
       for (size_t i = 0; i < m.spec.input.size(); ++i) s += (i ? ", " : "") + str(m.spec.input[i]);
       return s + "]";
     }},
    {"init",
     [](const YamlReader& r, const YAML::Node& v, const std::string& p, ModelSection& m) {
       m.spec.init = r.choice(v, p, "initializer", nn::initializer_names());
     },
     [](const ModelSection& m) { return m.spec.init; }},
    {"loss",
     [](const YamlReader& r, const YAML::Node& v, const std::string& p, ModelSection& m) {
       m.spec.loss = r.choice(v, p, "loss", nn::loss_names());
     },
     [](const ModelSection& m) { return m.spec.loss; }},
    {"layers",
     [](const YamlReader& r, const YAML::Node& v, const std::string& p, ModelSection& m) {
       if (!m.spec.parts.empty()) r.fail(v, p, "a model has `layers:` or `parts:`, not both");
       detail::LayerList list = detail::read_layer_list(r, v, p);
       m.spec.layers = std::move(list.layers);
       m.layer_paths = std::move(list.paths);
     }},
    // Named parts, in order, each a layer list: the model is their
    // concatenation, and each part can be built alone (Model::build_part).
    {"parts",
     [](const YamlReader& r, const YAML::Node& v, const std::string& p, ModelSection& m) {
       if (!m.spec.layers.empty()) r.fail(v, p, "a model has `layers:` or `parts:`, not both");
       if (!v.IsMap() || v.size() == 0)
         r.fail(v, p,
                "expected a map of named layer lists like {features: [...], classifier: [...]}, "
                "got " +
                    detail::describe_node(v));
       // `[]` is an empty part, the last one only: nn::Model builds it as the
       // identity (`classifier: []`: data-parallel through the hybrid trainer).
       std::optional<std::pair<YAML::Node, std::string>> empty;
       for (const auto& [key, list] : r.entries(v, p)) {
         const std::string path = p + "." + key.Scalar();
         if (empty)
           r.fail(empty->first, empty->second,
                  "only the last part may be empty (`[]`); this one is followed by `" +
                      key.Scalar() + "`");
         nn::PartSpec ps{key.Scalar(), m.spec.layers.size(), 0};
         if (list.IsSequence() && list.size() == 0) {
           empty.emplace(list, path);
         } else {
           detail::LayerList part = detail::read_layer_list(r, list, path);
           m.spec.layers.insert(m.spec.layers.end(), part.layers.begin(), part.layers.end());
           m.layer_paths.insert(m.layer_paths.end(), part.paths.begin(), part.paths.end());
         }
         ps.end = m.spec.layers.size();
         m.spec.parts.push_back(ps);
       }
       if (m.spec.layers.empty())
         r.fail(v, p, "a model needs at least one layer; every part is empty");
     }},
};

// ---- train -----------------------------------------------------------------

// `optimizer` and `schedule`: their keys are the registry's rows
// (nn::optimizer_section(), nn::schedule_section()), which the JSON codecs
// and docs/spec.md's tables walk too. `optimizer: adam` is short for
// `optimizer: {type: adam}`; likewise schedules. A key the type does not take
// is an error once the whole map has been read (the type may come last).
template <class S>
void read_section(const YamlReader& r, const YAML::Node& v, const std::string& p,
                  const nn::SectionInfo<S>& sec, S& out) {
  const std::string what(sec.name);
  if (v.IsScalar()) {
    out.type = r.choice(v, detail::join(p, "type"), what, sec.names);
    return;
  }
  std::vector<std::string_view> keys{"type"};
  for (const nn::SectionAttr<S>& f : sec.attrs) keys.push_back(f.info.name);
  std::vector<std::pair<YAML::Node, const nn::SectionAttr<S>*>> seen;
  for (const auto& [key, value] : r.entries(v, p)) {
    const std::string& k = key.Scalar();
    const std::string path = detail::join(p, k);
    if (k == "type") {
      out.type = r.choice(value, path, what, sec.names);
      continue;
    }
    const nn::SectionAttr<S>* field = nullptr;
    for (const nn::SectionAttr<S>& f : sec.attrs)
      if (f.info.name == k) field = &f;
    if (!field) r.fail(key, path, detail::unknown_key_message(k, p, keys));
    double x = 0;
    switch (field->info.kind) {
      case nn::AttrKind::kBool:
        x = r.boolean(value, path) ? 1 : 0;
        break;
      case nn::AttrKind::kInt:
        x = static_cast<double>(r.integer(value, path, {-kInf, kInf}));
        break;
      default:
        x = r.real(value, path, {-kInf, kInf});
        break;
    }
    const std::string problem = nn::check_attr(field->info, x);
    if (!problem.empty()) r.fail(value, path, problem);
    field->set(out, x);
    seen.emplace_back(key, field);
  }
  for (const auto& [key, field] : seen)
    if (!nn::applies_to(field->types, out.type))
      r.fail(key, detail::join(p, field->info.name),
             "'" + std::string(field->info.name) + "' applies only to type " +
                 std::string(field->types) + ", not '" + out.type + "'");
}

// Writes `type` and the attributes that apply to it, in the rows' order.
template <class S>
void write_section(std::string& out, const std::string& indent, const nn::SectionInfo<S>& sec,
                   const S& in) {
  out += indent + "type: " + in.type + "\n";
  for (const nn::SectionAttr<S>& f : sec.attrs) {
    if (!nn::applies_to(f.types, in.type)) continue;
    const double v = f.get(in);
    const std::string text = f.info.kind == nn::AttrKind::kBool  ? str(v != 0)
                             : f.info.kind == nn::AttrKind::kInt ? str(static_cast<int64_t>(v))
                                                                 : str(static_cast<float>(v));
    out += indent + std::string(f.info.name) + ": " + text + "\n";
  }
}

constexpr Field<nn::TrainSpec> kTrainFields[] = {
    {"epochs",
     [](const YamlReader& r, const YAML::Node& v, const std::string& p, nn::TrainSpec& t) {
       t.epochs = static_cast<int>(r.integer(v, p, {1, 1e6}));
     },
     [](const nn::TrainSpec& t) { return str(int64_t{t.epochs}); }},
    {"batch_size",
     [](const YamlReader& r, const YAML::Node& v, const std::string& p, nn::TrainSpec& t) {
       t.batch_size = static_cast<int>(r.integer(v, p, {1, 1 << 20}));
     },
     [](const nn::TrainSpec& t) { return str(int64_t{t.batch_size}); }},
    {"seed",
     [](const YamlReader& r, const YAML::Node& v, const std::string& p, nn::TrainSpec& t) {
       t.seed = r.unsigned_integer(v, p);
     },
     [](const nn::TrainSpec& t) { return std::to_string(t.seed); }},
    {"optimizer",
     [](const YamlReader& r, const YAML::Node& v, const std::string& p, nn::TrainSpec& t) {
       read_section(r, v, p, nn::optimizer_section(), t.optimizer);
     }},
    {"schedule",
     [](const YamlReader& r, const YAML::Node& v, const std::string& p, nn::TrainSpec& t) {
       read_section(r, v, p, nn::schedule_section(), t.schedule);
     }},
};

// ---- the whole file --------------------------------------------------------

struct Document {
  nn::RunSpec run;
  std::vector<std::string> layer_paths;
};

constexpr Field<Document> kTopFields[] = {
    {"name",
     [](const YamlReader& r, const YAML::Node& v, const std::string& p, Document& d) {
       d.run.name = r.string(v, p);
       // The name is the stem of the run's output files (<name>.safetensors).
       if (d.run.name.size() > 200 || d.run.name.find_first_of("\n\r\t/\\") != std::string::npos ||
           d.run.name == "." || d.run.name == "..")
         r.fail(v, p,
                "a name is one line of at most 200 characters, without '/' or '\\' and other than "
                "'.' or '..' (it names the output files)");
     },
     [](const Document& d) { return detail::yaml_string(d.run.name); }},
    {"data", [](const YamlReader& r, const YAML::Node& v, const std::string& p,
                Document& d) { detail::read_data_section(r, v, p, d.run.data); }},
    {"model",
     [](const YamlReader& r, const YAML::Node& v, const std::string& p, Document& d) {
       ModelSection m{d.run.model, {}};
       m.spec.where = r.where(v);
       detail::read_fields(r, v, p, kModelFields, m);
       d.run.model = std::move(m.spec);
       d.layer_paths = std::move(m.layer_paths);
     }},
    {"train", [](const YamlReader& r, const YAML::Node& v, const std::string& p,
                 Document& d) { detail::read_fields(r, v, p, kTrainFields, d.run.train); }},
};

// Checks between fields and sections, once everything has been read.
void check_consistency(const YamlReader& r, const YAML::Node& root, const Document& doc,
                       const DataFacts& data, nn::Shape* input, int64_t* classes) {
  const nn::RunSpec& run = doc.run;
  if (run.data.validation >= data.train_samples)
    r.fail(find_node(root, {"data", "validation"}), "data.validation",
           "must be smaller than the " + str(data.train_samples) + " training samples of '" +
               run.data.dataset + "'");
  if (run.data.limit_train > data.train_samples)
    r.fail(find_node(root, {"data", "limit_train"}), "data.limit_train",
           "'" + run.data.dataset + "' has only " + str(data.train_samples) + " training samples");

  if (run.model.layers.empty()) {
    r.fail(find_node(root, {"model"}), "model.layers",
           "a model needs at least one layer (add a `layers:` list to `model:`)");
  }
  *classes = data.classes;
  *input = data.sample;
  if (!run.model.input.empty()) {
    nn::Shape s;
    for (int64_t d : run.model.input) s[s.rank++] = d;
    if (s.numel() != input->numel())
      r.fail(find_node(root, {"model", "input"}), "model.input",
             "the input " + s.str() + " has " + str(s.numel()) + " values but samples of '" +
                 run.data.dataset + "' are " + input->str() + " (" + str(input->numel()) + ")");
    *input = s;
  }

  const nn::FieldProblem p = nn::check_train_fields(run.train.optimizer, run.train.schedule);
  if (!p.field.empty()) {
    const size_t dot = p.field.find('.');
    const std::string section = p.field.substr(0, dot), key = p.field.substr(dot + 1);
    r.fail(find_node(root, {"train", section.c_str(), key.c_str()}), "train." + p.field, p.message);
  }
}

// Puts each override's value into the tree at its dotted field, making the
// maps on the way; a section written in shorthand (`optimizer: sgd`) becomes
// `{type: sgd}` first. The values carry no location, so errors about them are
// told apart by their field (see parse_run_spec).
void apply_overrides(YAML::Node& root, std::span<const Override> overrides) {
  for (const Override& o : overrides) {
    YAML::Node n;
    n.reset(root);  // reset, not `=`: assigning a YAML::Node rewrites what it refers to
    std::string_view rest = o.field;
    for (size_t dot; (dot = rest.find('.')) != std::string_view::npos;
         rest.remove_prefix(dot + 1)) {
      const std::string key(rest.substr(0, dot));
      if (n[key].IsScalar()) {
        YAML::Node section(YAML::NodeType::Map);
        section["type"] = n[key].Scalar();
        n[key] = section;
      }
      YAML::Node child = n[key];
      n.reset(child);
    }
    n[std::string(rest)] = o.value;
  }
}

// A SpecError's message without its "file:line:column: 'field': " prefix.
std::string bare_message(const SpecError& e) {
  std::string message = e.what();
  std::string prefix = e.where().str() + ": " + (e.field().empty() ? "" : "'" + e.field() + "': ");
  if (message.compare(0, prefix.size(), prefix) == 0) message.erase(0, prefix.size());
  return message;
}

// Model::validate names a layer's location and a LayerSpec field; restate its
// error with the entry's dotted path so every spec error reads the same way.
[[noreturn]] void rethrow_with_path(const SpecError& e, const Document& doc) {
  std::string field = "model." + e.field();
  const auto& layers = doc.run.model.layers;
  for (size_t i = 0; i < layers.size(); ++i)
    if (layers[i].where.line == e.where().line && layers[i].where.column == e.where().column &&
        e.where().line > 0) {
      field = doc.layer_paths[i];
      break;
    }
  throw SpecError(e.where(), field, bare_message(e));
}

Document parse_document(const YamlReader& r, const std::string& text,
                        std::span<const Override> overrides = {}) {
  YAML::Node root = r.load(text);
  apply_overrides(root, overrides);
  Document doc;
  std::string stem = std::filesystem::path(r.file()).stem().string();
  doc.run.name = stem.empty() ? "run" : stem;
  doc.run.source = text;
  detail::read_fields(r, root, "", kTopFields, doc);
  if (!has_key(root, "model")) doc.run.model.where = r.where(root);

  const DataFacts data = resolve_data(r, root, doc.run.data);
  nn::Shape input;
  int64_t classes = 0;
  check_consistency(r, root, doc, data, &input, &classes);
  try {
    nn::Model::validate(doc.run.model, input, classes);
  } catch (const SpecError& e) {
    rethrow_with_path(e, doc);
  } catch (const std::bad_alloc&) {
    throw SpecError(doc.run.model.where, "model.layers", "the model is too large to build");
  } catch (const std::length_error&) {
    throw SpecError(doc.run.model.where, "model.layers", "the model is too large to build");
  } catch (const ShapeError& e) {
    throw SpecError(doc.run.model.where, "model.layers", e.what());
  }
  return doc;
}

}  // namespace

nn::RunSpec parse_run_spec(const std::string& text, const std::string& file) {
  YamlReader r(file);
  try {
    return parse_document(r, text).run;
  } catch (const YAML::Exception& e) {
    // yaml-cpp misuse that slipped through the typed reads: still the user's file.
    throw SpecError(r.where(e.mark), "", e.msg);
  }
}

nn::RunSpec parse_run_spec(const std::string& text, const std::string& file,
                           std::span<const Override> overrides) {
  nn::RunSpec run = parse_run_spec(text, file);  // the file's own errors, as they are
  if (overrides.empty()) return run;
  YamlReader r(file);
  try {
    return parse_document(r, text, overrides).run;
  } catch (const SpecError& e) {
    for (const Override& o : overrides)
      if (e.field() == o.field)
        throw SpecError(SpecLocation{o.flag, 0, 0}, e.field(), bare_message(e));
    std::string given;
    for (const Override& o : overrides)
      given += (given.empty() ? "" : " ") + o.flag + " " + o.value;
    throw SpecError(e.where(), e.field(), bare_message(e) + " (with " + given + ")");
  } catch (const YAML::Exception& e) {
    throw SpecError(r.where(e.mark), "", e.msg);
  }
}

nn::RunSpec load_run_spec(const std::string& path, std::span<const Override> overrides) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw SpecError(SpecLocation{path, 0, 0}, "", "is a directory, not a spec file");
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw SpecError(SpecLocation{path, 0, 0}, "",
                    "cannot open spec file '" + path + "': " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad())
    throw SpecError(SpecLocation{path, 0, 0}, "", "cannot read spec file '" + path + "'");
  return parse_run_spec(text.str(), path, overrides);
}

std::string to_yaml(const nn::RunSpec& run) {
  Document doc{run, {}};
  ModelSection model{run.model, {}};
  std::string out = "# dnnlab run spec (canonical form)\n";
  detail::write_fields(out, "", kTopFields, doc);
  out += "data:\n";
  detail::write_data_section(out, "  ", run.data);
  out += "model:\n";
  detail::write_fields(out, "  ", kModelFields, model);
  if (run.model.parts.empty()) {
    out += "  layers:\n";
    detail::write_layer_list(out, run.model.layers, "    ");
  } else {
    out += "  parts:\n";
    for (const nn::PartSpec& part : run.model.parts) {
      out += "    " + detail::yaml_string(part.name) + (part.end == part.begin ? ": []\n" : ":\n");
      std::vector<nn::LayerSpec> body(run.model.layers.begin() + part.begin,
                                      run.model.layers.begin() + part.end);
      detail::write_layer_list(out, body, "      ");
    }
  }
  out += "train:\n";
  detail::write_fields(out, "  ", kTrainFields, run.train);
  out += "  optimizer:\n";
  write_section(out, "    ", nn::optimizer_section(), run.train.optimizer);
  out += "  schedule:\n";
  write_section(out, "    ", nn::schedule_section(), run.train.schedule);
  return out;
}

}  // namespace dnnlab::spec
