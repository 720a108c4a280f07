// Shared pieces of the sweep subcommands (run, worker, results, status, rerun, export).
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "store/result_store.hpp"

namespace dnnlab::cli {

inline constexpr const char* kDefaultDb = "sqlite:dnnlab.db";

// An experiment named by id ("7") or by name (the newest with that name).
int64_t find_experiment(store::ResultStore& store, const std::string& id_or_name);

// Writes every kept weights file of the experiment as
// out_dir/<trial id>.safetensors (weights_cmds.cpp); a corrupt one is not
// written, and the error names each such trial after the others are.
int64_t export_weights(store::ResultStore& store, int64_t experiment, const std::string& out_dir);

// Prints the best trials per value of `group_by` (e.g. depth), or the top
// `top` trials when the sweep has no such parameter.
void print_best_table(store::ResultStore& store, int64_t experiment, const std::string& metric,
                      bool maximize, int top);

// A worker process started by `run` or `worker --slots` gets its store and
// broker URLs in the environment (DNNLAB_STORE_URL, DNNLAB_BROKER_URL), which
// only its user can read, not on its command line, which `ps` shows to
// everyone: the URLs may hold passwords. Returns this process's environment
// with the two set; `pointers` receives the envp to pass to posix_spawn
// (valid while the returned strings live).
inline constexpr const char* kStoreUrlEnv = "DNNLAB_STORE_URL";
inline constexpr const char* kBrokerUrlEnv = "DNNLAB_BROKER_URL";
std::vector<std::string> worker_environment(const std::string& store_url,
                                            const std::string& broker_url,
                                            std::vector<char*>& pointers);

}  // namespace dnnlab::cli
