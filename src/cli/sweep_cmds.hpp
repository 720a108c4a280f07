// Shared pieces of the sweep subcommands (run, worker, results, status, rerun, export).
#pragma once
#include <optional>
#include <string>

#include "store/result_store.hpp"

namespace dnnlab::cli {

inline constexpr const char* kDefaultDb = "sqlite:dnnlab.db";

// An experiment named by id ("7") or by name (the newest with that name).
int64_t find_experiment(store::ResultStore& store, const std::string& id_or_name);

// Prints the best trials per value of `group_by` (e.g. depth), or the top
// `top` trials when the sweep has no such parameter.
void print_best_table(store::ResultStore& store, int64_t experiment, const std::string& metric,
                      bool maximize, int top);

}  // namespace dnnlab::cli
