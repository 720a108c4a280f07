// dnnlab: the command-line entry point. Maps errors to exit codes:
// 2 bad spec or usage, 3 bad or missing data, 4 training diverged, 5 rerun
// differs, 6 a sweep ended with failed trials, 1 other (docs/errors.md); `join`
// returns its own 7 and 8.
#include <iostream>

#include "cli/commands.hpp"
#include "experiment/build_provenance.hpp"
#include "nn/errors.hpp"

int main(int argc, char** argv) {
  CLI::App app{"dnnlab: train and sweep neural networks on every core you can reach"};
  app.require_subcommand(1);
  // The same facts as /api/stats' "build" and every trial's provenance.
  app.set_version_flag("--version", std::function<std::string()>([] {
                         std::string text = dnnlab::experiment::version_text();
                         text.pop_back();  // CLI11 ends it with a newline of its own
                         return text;
                       }));
  std::vector<std::pair<CLI::App*, dnnlab::cli::Command>> commands;
  auto add = [&](dnnlab::cli::Command cmd) {
    commands.emplace_back(app.get_subcommands({}).back(), cmd);
  };
  add(dnnlab::cli::add_train(app));
  add(dnnlab::cli::add_run(app));
  add(dnnlab::cli::add_worker(app));
  add(dnnlab::cli::add_join(app));
  add(dnnlab::cli::add_results(app));
  add(dnnlab::cli::add_status(app));
  add(dnnlab::cli::add_export(app));
  add(dnnlab::cli::add_report(app));
  add(dnnlab::cli::add_rerun(app));
  add(dnnlab::cli::add_pin(app));
  add(dnnlab::cli::add_serve(app));
  add(dnnlab::cli::add_submit(app));
  add(dnnlab::cli::add_help_man(app));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version end here with 0; every usage error is 2 (CLI11's
    // own codes, 105 and up, are not part of dnnlab's contract).
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    for (auto& [sub, cmd] : commands)
      if (sub->parsed()) return cmd();
  } catch (const dnnlab::SpecError& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  } catch (const dnnlab::cli::UsageError& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  } catch (const dnnlab::DataError& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 3;
  } catch (const dnnlab::NumericError& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 4;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 1;
}
