// `dnnlab report EXP`: the study's report from the store, as one
// self-contained HTML file and a Markdown summary (src/report).
#include <filesystem>
#include <fstream>
#include <iostream>

#include "cli/commands.hpp"
#include "cli/sweep_cmds.hpp"
#include "report/gather.hpp"
#include "report/render.hpp"

namespace dnnlab::cli {

namespace {

struct ReportOptions {
  std::string store_url = kDefaultDb, experiment, out_dir = ".", data_dir;
};

int report(const ReportOptions& o) {
  auto s = store::open_result_store(o.store_url);
  const int64_t exp = find_experiment(*s, o.experiment);
  report::GatherOptions go;
  go.data_dir = o.data_dir;
  const report::Study study = report::gather(*s, exp, go);
  const report::Analysis analysis = report::analyse(study);
  const auto html = output_file(o.out_dir, study.name, "-report.html", "the experiment's name");
  const auto md = output_file(o.out_dir, study.name, "-report.md", "the experiment's name");
  std::filesystem::create_directories(o.out_dir);
  std::ofstream(html, std::ios::binary) << report::render_html(study, analysis);
  std::ofstream(md, std::ios::binary) << report::render_markdown(study, analysis);
  if (!std::ifstream(html) || !std::ifstream(md))
    throw std::runtime_error("cannot write the report to " + o.out_dir);
  std::cerr << "wrote " << html.string() << " and " << md.string() << " (" << study.trials.size()
            << " trials)\n";
  for (const auto& c : analysis.conclusions) std::cout << "  " << c << "\n";
  return 0;
}

}  // namespace

Command add_report(CLI::App& app) {
  auto o = std::make_shared<ReportOptions>();
  CLI::App* c = app.add_subcommand(
      "report",
      "Write an experiment's study report: <name>-report.html (plots as inline SVG, nothing "
      "fetched) and <name>-report.md");
  c->footer(
      "The report draws accuracy against depth per family and activation (every trial; pruned "
      "ones where they stopped), fits training time per epoch and per sample against depth "
      "(least squares, R²), lists the best configuration per depth and failed trials, and "
      "states conclusions with their rules: the depth from which a family stays at chance "
      "(1/classes), whether accuracy plateaus, the gap to plain nets, the cost per layer. Depth, "
      "family and activation are the sweep parameters named depth, family and activation (or "
      "layers, arch, act, ...); without a depth parameter another numeric one stands in, and the "
      "report says which.");
  c->add_option("experiment", o->experiment, "Experiment id or name")->required();
  c->add_option("--store", o->store_url, "Result store URL")->capture_default_str();
  c->add_option("--out", o->out_dir, "Directory for <name>-report.html and <name>-report.md")
      ->capture_default_str();
  c->add_option("--data", o->data_dir,
                "Data set directory (for the class count and samples per epoch)");
  return [o] { return report(*o); };
}

}  // namespace dnnlab::cli
