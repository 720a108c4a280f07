// The `dnnlab` subcommands. Each registers its flags on the CLI11 app and
// returns the function that runs it.
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string_view>

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

// Sizes of memory as people write them: "8G", "512MiB", "1.5GB", "4096"
// (bytes); K, M, G and T count in 1024s. nullopt for anything else.
std::optional<int64_t> parse_memory_size(std::string_view text);
CLI::Validator memory_size();
// Physical memory of this machine, in bytes (0 when unknown).
int64_t machine_memory();
// The default of --max-memory: the machine's memory shared by `slots`
// trials trained at once.
int64_t default_max_memory(int64_t slots);
// The bytes a --max-memory text stands for, or default_max_memory(slots)
// when it is empty.
int64_t max_memory_bytes(const std::string& flag_value, int64_t slots);
// Where that limit came from, for messages: " per worker (--max-memory)",
// " (this machine's memory)", " (this machine's memory shared by 4 workers)".
std::string memory_limit_source(const std::string& flag_value, int64_t slots,
                                const std::string& slot_word);

// dir/<name><suffix> for an output file named after a run or experiment,
// refusing names that would leave dir ("../x", "a/b"): UsageError naming
// `what` (the field the name came from).
std::filesystem::path output_file(const std::filesystem::path& dir, const std::string& name,
                                  const std::string& suffix, const std::string& what);

// The dashboard bundle's directory ($DNNLAB_WEB_DIR, ../share/dnnlab/web
// beside an installed binary, or web/dist of the build tree this binary came
// from); empty when it was not built.
std::string find_web_root();

// The server's limits and who it answers (connections, send queues, Origin,
// Host), shared by `serve` and `run`; docs/security.md lists them.
void add_limit_flags(CLI::App* c, server::ServerOptions& o);
// --tls-cert/--tls-key, on every command that starts the server.
void add_tls_flags(CLI::App* c, server::ServerOptions& o);

Command add_train(CLI::App& app);
Command add_run(CLI::App& app);
Command add_worker(CLI::App& app);
Command add_join(CLI::App& app);
Command add_results(CLI::App& app);
Command add_status(CLI::App& app);
Command add_export(CLI::App& app);
Command add_rerun(CLI::App& app);
Command add_pin(CLI::App& app);
Command add_serve(CLI::App& app);
Command add_submit(CLI::App& app);
Command add_report(CLI::App& app);
// Hidden: `dnnlab help-man [SUB] [--outdir DIR] [--bash-completion]`, the man
// pages and the bash completion written from `app` (man_page.cpp). Add it last.
Command add_help_man(CLI::App& app);
// The roff man page of one subcommand, or of dnnlab(1) when `sub` is null.
std::string man_page(const CLI::App& app, const CLI::App* sub);
std::string bash_completion(const CLI::App& app);

}  // namespace dnnlab::cli
