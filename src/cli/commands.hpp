// The `dnnlab` subcommands. Each registers its flags on the CLI11 app and
// returns the function that runs it.
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <stdexcept>

namespace dnnlab::server {
struct ServerOptions;
}

namespace dnnlab::cli {

using Command = std::function<int()>;

// A bad argument found once the command runs (no such experiment or trial, a
// trial that cannot be rerun): exit 2 like a usage error CLI11 finds.
struct UsageError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

// Flag checks whose messages read as sentences, e.g. "--workers: must be a
// whole number >= 1, got '0'" (CLI11's own say "not in range 0.000000 to 1.797e308").
CLI::Validator whole_number(int64_t lo, int64_t hi = INT64_MAX);
CLI::Validator number_in(double lo, double hi);

// The dashboard bundle's directory ($DNNLAB_WEB_DIR, or web/dist of the
// build tree this binary came from); empty when it was not built.
std::string find_web_root();

// The server's limits and who it answers (connections, send queues, Origin,
// Host), shared by `serve` and `run`; docs/security.md lists them.
void add_limit_flags(CLI::App* c, server::ServerOptions& o);
// --tls-cert/--tls-key, on every command that starts the server.
void add_tls_flags(CLI::App* c, server::ServerOptions& o);

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
