// Reading results: `dnnlab results`, `status`, `export`, and `rerun` (which
// trains a stored trial again and checks the numbers match bit for bit).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>

#include "cli/commands.hpp"
#include "cli/progress.hpp"
#include "cli/sweep_cmds.hpp"
#include "data/dataset.hpp"
#include "db/backend_url.hpp"
#include "experiment/catalogue.hpp"
#include "experiment/coordinator.hpp"
#include "experiment/training_run.hpp"
#include "store/trial_json.hpp"
#include "sweep/sampler.hpp"

namespace dnnlab::cli {

int64_t find_experiment(store::ResultStore& store, const std::string& key) {
  // A sweep may be named "2024": a number is an id or a name, and when it is
  // both (of different experiments) the user has to say which.
  std::optional<store::ExperimentRecord> by_id, by_name;
  if (!key.empty() && key.size() <= 18 && key.find_first_not_of("0123456789") == std::string::npos)
    by_id = store.experiment(std::stoll(key));
  for (const auto& e : store.experiments())  // newest first
    if (e.name == key) {
      by_name = e;
      break;
    }
  if (by_id && by_name && by_id->id != by_name->id)
    throw UsageError("'" + key + "' is the id of experiment " + key + " ('" + by_id->name +
                     "') and the name of experiment " + std::to_string(by_name->id) +
                     "; give that one by its id, " + std::to_string(by_name->id));
  if (by_id) return by_id->id;
  if (by_name) return by_name->id;
  throw UsageError("no experiment with id or name '" + key + "' (see `dnnlab status`)");
}

namespace {

std::string fmt(const std::optional<double>& v, const char* f = "%.4f") {
  if (!v) return "-";
  char b[32];
  std::snprintf(b, sizeof b, f, *v);
  return b;
}

std::string param_str(const nlohmann::json& p) {
  if (p.is_string()) return p.get<std::string>();
  return p.dump();
}

// One CSV field (RFC 4180): quoted when it holds a comma, quote or line break.
std::string csv(const std::string& v) {
  if (v.find_first_of(",\"\r\n") == std::string::npos) return v;
  std::string q = "\"";
  for (char c : v) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

// A trial's parameter value (null when the trial's config lacks it).
nlohmann::json param_value(const nlohmann::json& cfg, const std::string& name) {
  return cfg.contains(name) ? cfg[name] : nlohmann::json();
}

// A parameter value as a table key: numbers by value and before anything
// else (strings, booleans, lists), which sort by their text.
struct ParamKey {
  bool not_number = true;
  double number = 0;
  std::string text;
  explicit ParamKey(const nlohmann::json& v)
      : not_number(!v.is_number()),
        number(v.is_number() ? v.get<double>() : 0),
        text(v.is_null() ? "-" : param_str(v)) {}
  auto operator<=>(const ParamKey&) const = default;
};

void print_rows(const std::vector<store::TrialRecord>& rows,
                const std::vector<std::string>& params) {
  // "trial" is the store-wide id everywhere: what `rerun` takes.
  std::printf("%6s  %-9s", "trial", "status");
  for (const auto& p : params) std::printf("  %10s", p.c_str());
  std::printf("  %7s  %8s  %8s  %6s  %8s\n", "val_acc", "val_loss", "test_acc", "epochs",
              "seconds");
  for (const auto& t : rows) {
    auto cfg = nlohmann::json::parse(t.config_json);
    std::printf("%6lld  %-9s", static_cast<long long>(t.id),
                std::string(store::to_string(t.status)).c_str());
    for (const auto& p : params) std::printf("  %10s", ParamKey(param_value(cfg, p)).text.c_str());
    std::printf("  %7s  %8s  %8s  %6lld  %8s\n", fmt(t.metrics.val_acc).c_str(),
                fmt(t.metrics.val_loss).c_str(), fmt(t.metrics.test_acc).c_str(),
                static_cast<long long>(t.metrics.epochs_done),
                fmt(t.metrics.seconds, "%.2f").c_str());
  }
}

std::vector<std::string> param_names(store::ResultStore& s, int64_t exp) {
  auto e = s.experiment(exp);
  std::vector<std::string> names;
  for (const auto& p : sweep::parse_sweep(e->spec_text, e->spec_path).search.parameters)
    names.push_back(p.name);
  return names;
}

std::vector<store::TrialRecord> all_trials(store::ResultStore& s, int64_t exp,
                                           const std::string& sort = "index", bool desc = false) {
  store::TrialQuery q;
  q.sort_by = sort;
  q.descending = desc;
  q.limit = 0;
  return s.trials(exp, q);
}

}  // namespace

void print_best_table(store::ResultStore& s, int64_t exp, const std::string& metric, bool maximize,
                      int top) {
  auto params = param_names(s, exp);
  auto trials = all_trials(s, exp, metric, maximize);
  std::vector<store::TrialRecord> ended;
  std::int64_t unverified = 0;
  for (auto& t : trials)
    if (t.status == store::TrialStatus::finished || t.status == store::TrialStatus::pruned) {
      // A browser result no native re-run has checked is never ranked (docs/security.md).
      if (t.provisional)
        ++unverified;
      else
        ended.push_back(t);
    }
  if (unverified)
    std::printf("(%lld unverified browser results left out of the ranking)\n",
                static_cast<long long>(unverified));
  const bool by_depth = std::find(params.begin(), params.end(), "depth") != params.end();
  if (!by_depth) {
    if (static_cast<int>(ended.size()) > top) ended.resize(top);
    std::printf("best %d trials by %s:\n", top, metric.c_str());
    print_rows(ended, params);
    return;
  }
  // Best trial per (depth, activation if any): the table of a depth study.
  const bool by_act = std::find(params.begin(), params.end(), "activation") != params.end();
  // Depth may be any parameter type (a choice of strings, a float range).
  std::map<std::pair<ParamKey, ParamKey>, store::TrialRecord> best;
  for (auto& t : ended) {  // sorted best first
    auto cfg = nlohmann::json::parse(t.config_json);
    best.emplace(std::make_pair(ParamKey(param_value(cfg, "depth")),
                                ParamKey(by_act ? param_value(cfg, "activation") : nullptr)),
                 t);
  }
  std::vector<store::TrialRecord> rows;
  for (auto& [k, t] : best) rows.push_back(t);
  std::printf("best trial per depth%s by %s:\n", by_act ? " and activation" : "", metric.c_str());
  print_rows(rows, params);
}

namespace {

struct ResultsOptions {
  std::string store_url = kDefaultDb, experiment, sort = "val_acc", out_dir = ".";
  int top = 20;
  bool csv = false, json = false, ascending = false, descending = false;
  bool weights = false;  // export: the kept weights files too
};

// The trials as a JSON array, one trial a line, each written by the REST
// API's encoder (store/trial_json.hpp): the same fields and values as
// GET /api/experiments/{id}/trials, the seed as a decimal string included.
void write_trials_json(std::ostream& out, const std::vector<store::TrialRecord>& rows) {
  std::string text = "[";
  for (std::size_t i = 0; i < rows.size(); ++i) {
    text += i ? ",\n  " : "\n  ";
    store::append_trial_json(text, rows[i]);
  }
  text += rows.empty() ? "]\n" : "\n]\n";
  out << text;
}

void write_trials_csv(std::ostream& out, const std::vector<store::TrialRecord>& rows,
                      const std::vector<std::string>& params) {
  out << "trial_id,index,status,attempt,seed";
  for (auto& p : params) out << "," << csv(p);
  out << ",train_loss,train_acc,val_loss,val_acc,test_acc,epochs_done,seconds,error\n";
  for (const auto& t : rows) {
    auto cfg = nlohmann::json::parse(t.config_json);
    out << t.id << "," << t.index << "," << store::to_string(t.status) << "," << t.attempt << ","
        << t.seed;
    for (auto& p : params) out << "," << (cfg.contains(p) ? csv(param_str(cfg[p])) : "");
    out << "," << fmt(t.metrics.train_loss, "%.9g") << "," << fmt(t.metrics.train_acc, "%.9g")
        << "," << fmt(t.metrics.val_loss, "%.9g") << "," << fmt(t.metrics.val_acc, "%.9g") << ","
        << fmt(t.metrics.test_acc, "%.9g") << "," << t.metrics.epochs_done << ","
        << t.metrics.seconds << "," << csv(t.error.substr(0, 200)) << "\n";
  }
}

int results(const ResultsOptions& o) {
  auto s = store::open_result_store(o.store_url);
  const int64_t exp = find_experiment(*s, o.experiment);
  store::TrialQuery q;
  q.sort_by = o.sort;
  // The better end first by default: largest accuracy, smallest loss.
  q.descending = o.descending || (!o.ascending && o.sort.find("loss") == std::string::npos);
  q.limit = o.top;
  std::vector<store::TrialRecord> rows;
  try {
    rows = s->trials(exp, q);
  } catch (const std::invalid_argument& e) {  // an unknown column
    throw UsageError(std::string("--sort: ") + e.what());
  }
  auto params = param_names(*s, exp);
  if (o.json) {
    write_trials_json(std::cout, rows);
  } else if (o.csv) {
    write_trials_csv(std::cout, rows, params);
  } else {
    print_rows(rows, params);
  }
  return 0;
}

int status(const ResultsOptions& o) {
  auto s = store::open_result_store(o.store_url);
  std::printf("%4s  %-20s  %-9s  %-6s  %8s  %7s  %6s  %6s  %6s\n", "id", "name", "status", "method",
              "finished", "running", "queued", "pruned", "failed");
  for (const auto& e : s->experiments()) {
    auto c = s->trial_counts(e.id);
    std::printf("%4lld  %-20s  %-9s  %-6s  %8lld  %7lld  %6lld  %6lld  %6lld\n",
                static_cast<long long>(e.id), e.name.c_str(),
                std::string(store::to_string(e.status)).c_str(), e.method.c_str(),
                static_cast<long long>(c.finished), static_cast<long long>(c.running),
                static_cast<long long>(c.queued), static_cast<long long>(c.pruned),
                static_cast<long long>(c.failed));
  }
  auto ws = s->workers();
  std::erase_if(ws, [](const store::WorkerRecord& w) { return w.gone; });
  if (!ws.empty()) std::printf("\nworkers:\n");
  for (const auto& w : ws)
    std::printf("  %-24s %-7s pid %-7lld trial %s\n", w.id.c_str(),
                std::string(store::to_string(w.kind)).c_str(), static_cast<long long>(w.pid),
                w.current_trial ? std::to_string(*w.current_trial).c_str() : "-");
  return 0;
}

int export_csv(const ResultsOptions& o) {
  auto s = store::open_result_store(o.store_url);
  const int64_t exp = find_experiment(*s, o.experiment);
  auto e = s->experiment(exp);
  auto rows = all_trials(*s, exp);
  auto params = param_names(*s, exp);
  const auto trials_path = output_file(o.out_dir, e->name, "-trials.csv", "the experiment's name");
  const auto curves_path = output_file(o.out_dir, e->name, "-curves.csv", "the experiment's name");
  std::filesystem::create_directories(o.out_dir);
  std::ofstream t(trials_path), c(curves_path);
  write_trials_csv(t, rows, params);
  c << "trial_id,index,epoch,train_loss,train_acc,val_loss,val_acc,seconds,lr\n";
  for (const auto& row : rows) {
    // Held by name: a range-for over `s->trial(id)->curve` reads a destroyed temporary.
    const std::optional<store::TrialRecord> trial = s->trial(row.id);
    if (!trial) continue;
    for (const auto& m : trial->curve)
      c << row.id << "," << row.index << "," << m.epoch << "," << fmt(m.train_loss, "%.9g") << ","
        << fmt(m.train_acc, "%.9g") << "," << fmt(m.val_loss, "%.9g") << ","
        << fmt(m.val_acc, "%.9g") << "," << m.seconds << "," << fmt(m.lr, "%.9g") << "\n";
  }
  if (!t || !c) throw std::runtime_error("cannot write to " + o.out_dir);
  std::cerr << "wrote " << trials_path.string() << " (" << rows.size() << " trials) and "
            << curves_path.string() << "\n";
  if (o.weights) export_weights(*s, exp, o.out_dir);
  return 0;
}

struct RerunOptions {
  std::string store_url = kDefaultDb, data_dir;
  int64_t trial = 0;
};

// Ends a rerun after the epochs the stored trial trained. The spec keeps its
// epochs: a pruned trial's learning-rate schedule spanned all of them.
class StopAfterEpochs : public nn::TrainObserver {
 public:
  explicit StopAfterEpochs(int64_t epochs) : epochs_(epochs) {}
  bool on_epoch(const nn::EpochResult& r) override { return r.epoch < epochs_; }

 private:
  int64_t epochs_;
};

int rerun(const RerunOptions& o) {
  auto s = store::open_result_store(o.store_url);
  auto t = s->trial(o.trial);
  if (!t)
    throw UsageError("no trial with id " + std::to_string(o.trial) + " in " +
                     backend_url::redact(o.store_url) +
                     " (`dnnlab results EXPERIMENT` lists them)");
  if ((t->status != store::TrialStatus::finished && t->status != store::TrialStatus::pruned) ||
      t->metrics.epochs_done < 1)
    throw UsageError("trial " + std::to_string(t->id) + " is " +
                     std::string(store::to_string(t->status)) +
                     ": rerun checks the stored numbers of a finished or pruned trial");
  experiment::Catalogue catalogue(*s);
  const nn::RunSpec run = catalogue.run_spec(*t);
  experiment::DataCache data_cache(o.data_dir, 1);
  const data::Dataset& data = data_cache.get(run.data).data;
  std::cerr << "rerunning trial " << t->id << " ("
            << sweep::describe_params(nlohmann::json::parse(t->config_json)) << ", seed " << t->seed
            << ", " << t->metrics.epochs_done << " of " << run.train.epochs << " epochs)\n";
  StopAfterEpochs stop(t->metrics.epochs_done);
  // A pruned trial stored without a test accuracy (a sweep's worker skips
  // it) is rerun without one; a stored one is checked.
  experiment::RunResult r =
      experiment::train_run(run, data, &stop, nullptr, nullptr,
                            t->metrics.test_acc ? experiment::TestWhenStopped::evaluate
                                                : experiment::TestWhenStopped::skip);
  if (static_cast<int64_t>(r.curve.size()) != t->metrics.epochs_done)
    throw std::runtime_error("the rerun trained " + std::to_string(r.curve.size()) +
                             " epochs, the stored trial " + std::to_string(t->metrics.epochs_done));
  int mismatches = 0;
  // No validation (or test) data: no value, stored or rerun.
  auto check = [&](const char* what, const std::optional<double>& stored,
                   const std::optional<double>& now) {
    const bool same = stored == now;
    mismatches += !same;
    std::printf("%-10s stored %-12s rerun %-12s  %s\n", what, fmt(stored, "%.9g").c_str(),
                fmt(now, "%.9g").c_str(), same ? "identical" : "DIFFERENT");
  };
  const auto& last = r.curve.back();
  check("train_loss", t->metrics.train_loss, last.train_loss);
  check("val_acc", t->metrics.val_acc, last.val_acc);
  check("val_loss", t->metrics.val_loss, last.val_loss);
  check("test_acc", t->metrics.test_acc,
        r.tested ? std::optional<double>(r.test_acc) : std::nullopt);
  const std::string build_then = t->provenance.value("build_id", "?");
  const std::string build_now = experiment::provenance(data).value("build_id", "?");
  if (mismatches && build_then != build_now)
    std::printf("note: stored with build %s, rerun with build %s\n", build_then.c_str(),
                build_now.c_str());
  return mismatches ? 5 : 0;
}

}  // namespace

Command add_results(CLI::App& app) {
  auto o = std::make_shared<ResultsOptions>();
  CLI::App* c = app.add_subcommand("results", "Show an experiment's best trials");
  c->add_option("experiment", o->experiment, "Experiment id or name")->required();
  c->add_option("--store", o->store_url, "Result store URL")->capture_default_str();
  c->add_option("--top", o->top, "Number of trials (0: all)")
      ->capture_default_str()
      ->check(whole_number(0, INT32_MAX));
  c->add_option("--sort", o->sort,
                "Sort column: val_acc, val_loss, test_acc, train_loss, seconds, index, ...")
      ->capture_default_str();
  auto* asc = c->add_flag("--ascending", o->ascending,
                          "Smallest first (default: largest first, except for losses)");
  c->add_flag("--descending", o->descending,
              "Largest first (default: largest first, except for losses)")
      ->excludes(asc);
  c->add_flag("--csv", o->csv, "CSV output");
  c->add_flag("--json", o->json, "JSON output");
  return [o] { return results(*o); };
}

Command add_status(CLI::App& app) {
  auto o = std::make_shared<ResultsOptions>();
  CLI::App* c = app.add_subcommand("status", "List experiments and live workers");
  c->add_option("--store", o->store_url, "Result store URL")->capture_default_str();
  return [o] { return status(*o); };
}

Command add_export(CLI::App& app) {
  auto o = std::make_shared<ResultsOptions>();
  CLI::App* c =
      app.add_subcommand("export", "Write an experiment's trials and learning curves as CSV");
  c->add_option("experiment", o->experiment, "Experiment id or name")->required();
  c->add_option("--store", o->store_url, "Result store URL")->capture_default_str();
  c->add_option("--out", o->out_dir, "Directory for <name>-trials.csv and <name>-curves.csv")
      ->capture_default_str();
  c->add_flag("--weights", o->weights,
              "Also write every kept weights file as <trial id>.safetensors (see `dnnlab pin`)");
  return [o] { return export_csv(*o); };
}

Command add_rerun(CLI::App& app) {
  auto o = std::make_shared<RerunOptions>();
  CLI::App* c =
      app.add_subcommand("rerun", "Train a stored trial again and compare its numbers bit for bit");
  c->add_option("trial", o->trial, "Trial id (the `trial` column of `dnnlab results`)")
      ->required()
      ->check(whole_number(1));
  c->add_option("--store", o->store_url, "Result store URL")->capture_default_str();
  c->add_option("--data", o->data_dir, "Data set directory override");
  return [o] { return rerun(*o); };
}

}  // namespace dnnlab::cli
