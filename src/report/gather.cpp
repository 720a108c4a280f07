// A study from the store (gather.hpp): trials, their curves, the axes.
#include "report/gather.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <stdexcept>

#include "data/dataset.hpp"
#include "sweep/sweep_spec.hpp"

namespace dnnlab::report {

namespace {

using nlohmann::json;

std::string value_text(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_null()) return "";
  return v.dump();
}

// The sweep's parameter names in file order, and the choices of each, as
// text (ranges have none). From the trials' values when the stored sweep no
// longer parses.
struct ParamInfo {
  std::vector<std::string> names;
  std::map<std::string, std::vector<std::string>> choices;
};

const std::string* first_present(const ParamInfo& p, std::initializer_list<const char*> names) {
  for (const char* n : names)
    for (const auto& have : p.names)
      if (have == n) return &have;
  return nullptr;
}

// Numeric in every trial that has it, with two distinct values at least.
bool numeric_axis(const std::vector<json>& configs, const std::string& name) {
  std::set<double> seen;
  for (const auto& c : configs) {
    auto it = c.find(name);
    if (it == c.end()) continue;
    if (!it->is_number()) return false;
    seen.insert(it->get<double>());
  }
  return seen.size() >= 2;
}

// The read-out layer's units: the class count when the data cannot be read.
int classes_from_model(const nn::RunSpec& run) {
  for (auto it = run.model.layers.rbegin(); it != run.model.layers.rend(); ++it)
    if (it->attrs.num.count("units")) return static_cast<int>(it->attrs.get("units"));
  return 0;
}

void find_data_facts(Study& s, const sweep::SweepSpec& sweep, const json& params,
                     const GatherOptions& o) {
  nn::RunSpec run;
  try {
    run = sweep.instantiate(params);
  } catch (const std::exception& e) {
    s.notes.push_back(std::string("the first trial's spec did not parse again: ") + e.what());
    return;
  }
  try {
    const data::SampleShape shape = data::sample_shape(data::load_options(run.data, o.data_dir));
    s.classes = shape.num_classes;
    std::int64_t n = shape.train_samples - run.data.validation;
    if (run.data.limit_train > 0) n = std::min(n, run.data.limit_train);
    if (n > 0) s.samples = n;
  } catch (const std::exception& e) {
    s.classes = classes_from_model(run);
    s.notes.push_back("the data set was not found here (" + std::string(e.what()) +
                      "): chance from the model's read-out layer (" + std::to_string(s.classes) +
                      " classes), no time per sample");
  }
}

void pick_axes(Study& s, const ParamInfo& p, const std::vector<json>& configs) {
  if (const auto* d = first_present(p, {"depth", "layers", "num_layers", "n_layers", "blocks"})) {
    s.depth_param = *d;
  } else {
    for (const auto& n : p.names)
      if (numeric_axis(configs, n)) {
        s.depth_param = n;
        break;
      }
    s.notes.push_back(s.depth_param.empty()
                          ? "the sweep has no depth parameter and no numeric one: trials are "
                            "drawn by their index"
                          : "the sweep has no depth parameter: its numeric parameter " +
                                s.depth_param + " stands in for depth");
  }
  if (const auto* f = first_present(p, {"family", "arch", "architecture", "block", "net"}))
    s.family_param = *f;
  if (const auto* a = first_present(p, {"activation", "act", "nonlinearity"}))
    s.activation_param = *a;
  if (s.family_param.empty())
    s.notes.push_back("no family parameter (family, arch, architecture, block, net): one family");
  // Each axis's values in the sweep's order, then any others the trials hold.
  auto values = [&](const std::string& name, std::vector<std::string>& out) {
    if (name.empty()) {
      out = {""};
      return;
    }
    if (auto it = p.choices.find(name); it != p.choices.end()) out = it->second;
    for (const auto& c : configs) {
      std::string v = c.contains(name) ? value_text(c[name]) : "";
      if (std::find(out.begin(), out.end(), v) == out.end()) out.push_back(v);
    }
  };
  values(s.family_param, s.families);
  values(s.activation_param, s.activations);
}

}  // namespace

Study gather(store::ResultStore& store, std::int64_t experiment_id, const GatherOptions& o) {
  auto e = store.experiment(experiment_id);
  if (!e) throw std::invalid_argument("no experiment " + std::to_string(experiment_id));
  Study s;
  s.experiment_id = e->id;
  s.name = e->name;
  s.status = std::string(store::to_string(e->status));

  store::TrialQuery q;
  q.limit = 0;
  std::vector<store::TrialRecord> trials = store.trials(experiment_id, q);
  std::vector<json> configs;
  for (const auto& t : trials) {
    json c = json::parse(t.config_json, nullptr, false);
    configs.push_back(c.is_object() ? c : json::object());
  }

  ParamInfo p;
  std::optional<sweep::SweepSpec> sweep;
  try {
    sweep = sweep::parse_sweep(e->spec_text, e->spec_path.empty() ? e->name : e->spec_path);
    s.metric = sweep->search.metric;
    for (const auto& ps : sweep->search.parameters) {
      p.names.push_back(ps.name);
      if (ps.kind == sweep::ParamKind::kChoice)
        for (const auto& c : ps.choices) p.choices[ps.name].push_back(value_text(c));
    }
  } catch (const std::exception& ex) {
    s.notes.push_back(std::string("the stored sweep does not parse (") + ex.what() +
                      "): parameters from the trials");
    for (const auto& c : configs)
      for (auto it = c.begin(); it != c.end(); ++it)
        if (std::find(p.names.begin(), p.names.end(), it.key()) == p.names.end())
          p.names.push_back(it.key());
  }
  if (s.metric != "val_acc")
    s.notes.push_back("accuracy is val_acc (the sweep ranks by " + s.metric + ")");
  s.metric = "val_acc";
  pick_axes(s, p, configs);
  if (sweep && !trials.empty()) find_data_facts(s, *sweep, configs.front(), o);

  std::map<std::int64_t, store::TrialCurve> curves;
  for (auto& c : store.curves_since(experiment_id, 0).trials) curves[c.trial_id] = std::move(c);
  std::int64_t undrawn = 0;
  for (std::size_t i = 0; i < trials.size(); ++i) {
    const auto& t = trials[i];
    const json& c = configs[i];
    TrialRow r;
    r.id = t.id;
    r.index = t.index;
    r.status = std::string(store::to_string(t.status));
    r.provisional = t.provisional;
    r.params = sweep::describe_params(c);
    r.error = t.error;
    auto text = [&c](const std::string& name) {
      return name.empty() || !c.contains(name) ? std::string() : value_text(c[name]);
    };
    r.family = text(s.family_param);
    r.activation = text(s.activation_param);
    if (s.depth_param.empty())
      r.depth = static_cast<double>(t.index);
    else if (c.contains(s.depth_param) && c[s.depth_param].is_number())
      r.depth = c[s.depth_param].get<double>();
    else {
      ++undrawn;  // no numeric value to draw it at
      continue;
    }
    std::vector<store::EpochMetrics> curve;
    if (auto it = curves.find(t.id); it != curves.end() && it->second.attempt == t.attempt)
      curve = it->second.curve;
    std::erase_if(curve, [](const store::EpochMetrics& m) { return m.epoch <= 0; });
    r.epochs = std::max<std::int64_t>(
        static_cast<std::int64_t>(curve.size()),
        t.status == store::TrialStatus::finished ? t.metrics.epochs_done : 0);
    // A finished trial's accuracy is its final one (what the store ranks);
    // any other's the last epoch it reported (where a pruned one stopped).
    if (t.status == store::TrialStatus::finished && t.metrics.val_acc)
      r.accuracy = t.metrics.val_acc;
    for (auto it = curve.rbegin(); !r.accuracy && it != curve.rend(); ++it)
      r.accuracy = it->val_acc;
    double secs = 0;
    std::int64_t n = 0;
    for (const auto& m : curve)
      if (m.seconds > 0) {
        secs += m.seconds;
        ++n;
      }
    if (n) {
      r.epoch_seconds = secs / static_cast<double>(n);
      if (s.samples) r.sample_seconds = *r.epoch_seconds / static_cast<double>(*s.samples);
    }
    s.trials.push_back(std::move(r));
  }
  if (undrawn)
    s.notes.push_back(std::to_string(undrawn) + " trials have no numeric " + s.depth_param +
                      " value and are left out");
  if (s.depth_param.empty()) s.depth_param = "trial index";
  return s;
}

}  // namespace dnnlab::report
