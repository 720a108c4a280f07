// The `dnnlab` subcommands. Each registers its flags on the CLI11 app and
// returns the function that runs it.
#pragma once
#include <CLI/CLI.hpp>
#include <functional>

namespace dnnlab::cli {

using Command = std::function<int()>;

// The dashboard bundle's directory ($DNNLAB_WEB_DIR, or web/dist of the
// build tree this binary came from); empty when it was not built.
std::string find_web_root();

Command add_train(CLI::App& app);
Command add_run(CLI::App& app);
Command add_worker(CLI::App& app);
Command add_results(CLI::App& app);
Command add_status(CLI::App& app);
Command add_export(CLI::App& app);
Command add_rerun(CLI::App& app);
Command add_serve(CLI::App& app);
Command add_submit(CLI::App& app);

}  // namespace dnnlab::cli
