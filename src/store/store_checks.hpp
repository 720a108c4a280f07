// Backend-neutral pieces of the ResultStore backends: argument checks that
// name the field, the whitelist of sort columns (the only strings spliced
// into SQL) and their ORDER BY (valid SQL for SQLite and PostgreSQL alike),
// the column lists both backends' row readers expect, and a clock.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <string_view>

#include "store/result_store.hpp"

namespace dnnlab::store::checks {

// TrialQuery.sort_by name -> column. The only strings ever spliced into SQL.
struct SortColumn {
  std::string_view name;
  std::string_view column;
  // SQLite integers are signed: a uint64 column (the seed) holds its bit
  // pattern, so values from 2^63 up read as negative and must sort after the rest.
  bool unsigned64 = false;
};
constexpr std::array<SortColumn, 15> kSortColumns{{
    {"id", "id"},
    {"index", "idx"},
    {"seed", "seed", true},
    {"status", "status"},
    {"attempt", "attempt"},
    {"started_at", "started_at"},
    {"finished_at", "finished_at"},
    {"train_loss", "train_loss"},
    {"train_acc", "train_acc"},
    {"val_loss", "val_loss"},
    {"val_acc", "val_acc"},
    {"test_acc", "test_acc"},
    {"epochs_done", "epochs_done"},
    {"seconds", "seconds"},
    {"worker", "worker"},
}};

// "params.NAME" sorts by the trial's parameter NAME (its config's top-level
// key). NAME is checked to be a ${name} (letters, digits, _) before the
// backend splices it into its JSON lookup; unknown to the trial: sorts last.
constexpr std::string_view kParamSortPrefix = "params.";

// The columns of a TrialRecord / ExperimentRecord in the order each
// backend's read_trial / read_experiment reads them (one schema, two dialects).
// A running trial's metrics and epochs_done are written only when it ends: until
// then they are read from its current attempt's last stored epoch (and count),
// so that lists show how far it got (a select from `trials` without an alias).
#define DNNLAB_RUNNING_LAST_EPOCH(col)                                                   \
  "CASE WHEN status = 'running' THEN (SELECT e." col                                     \
  " FROM epochs e WHERE e.trial_id = trials.id AND e.attempt = trials.attempt ORDER BY " \
  "e.epoch DESC LIMIT 1) ELSE " col " END"
constexpr std::string_view kTrialColumns =
    "id, experiment_id, idx, config, seed, status, attempt, worker, started_at, finished_at, " //
    DNNLAB_RUNNING_LAST_EPOCH("train_loss") ", " DNNLAB_RUNNING_LAST_EPOCH("train_acc") ", " //
    DNNLAB_RUNNING_LAST_EPOCH("val_loss") ", " DNNLAB_RUNNING_LAST_EPOCH("val_acc") ", "     //
    "test_acc, CASE WHEN status = 'running' THEN (SELECT count(*) FROM epochs e WHERE "    //
    "e.trial_id = trials.id AND e.attempt = trials.attempt) ELSE epochs_done END, "         //
    "seconds, error, provenance, provisional, pinned";
#undef DNNLAB_RUNNING_LAST_EPOCH

constexpr std::string_view kExperimentColumns =
    "id, name, spec_text, spec_hash, spec_path, method, created_at, status, provenance, "
    "published_index";

inline const SortColumn& find_sort_column(std::string_view name, std::string_view field) {
  for (const SortColumn& c : kSortColumns)
    if (c.name == name) return c;
  std::string allowed;
  for (const SortColumn& c : kSortColumns)
    allowed += (allowed.empty() ? "" : ", ") + std::string(c.name);
  throw std::invalid_argument(std::string(field) + ": unknown column '" + std::string(name) +
                              "' (allowed: " + allowed + ")");
}

inline std::string_view sort_column(std::string_view name, std::string_view field) {
  return find_sort_column(name, field).column;
}

// "col DIR NULLS LAST", or for a uint64 column its unsigned order: the
// non-negative int64 values first (0 .. 2^63-1), then the negative ones
// (2^63 .. 2^64-1), which already sort among themselves as unsigned.
inline std::string order_by(const SortColumn& c, bool descending) {
  const std::string dir = descending ? " DESC" : " ASC";
  const std::string col(c.column);
  if (c.unsigned64) return "(" + col + " < 0)" + dir + ", " + col + dir;
  return col + dir + " NULLS LAST";
}

// The parameter name of a "params.NAME" sort, checked; empty for a column sort.
inline std::string_view sort_param(std::string_view sort_by) {
  if (!sort_by.starts_with(kParamSortPrefix)) return {};
  const std::string_view name = sort_by.substr(kParamSortPrefix.size());
  bool ok = !name.empty();
  for (char c : name)
    ok = ok &&
         ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_');
  if (!ok)
    throw std::invalid_argument("sort_by: '" + std::string(sort_by) +
                                "' is not params.NAME with NAME of letters, digits and _");
  return name;
}

// Checks a TrialQuery (sort_by, then limit, then offset); its ORDER BY (ties
// by index). `param` is the backend's expression for a parameter's value.
template <typename ParamExpr>
std::string check_trial_query(const TrialQuery& q, ParamExpr param) {
  std::string order;
  if (const std::string_view name = sort_param(q.sort_by); !name.empty())
    order = param(name) + (q.descending ? " DESC" : " ASC") + " NULLS LAST";
  else
    order = order_by(find_sort_column(q.sort_by, "sort_by"), q.descending);
  if (q.limit < 0)
    throw std::invalid_argument("limit must not be negative, got " + std::to_string(q.limit));
  if (q.offset < 0)
    throw std::invalid_argument("offset must not be negative, got " + std::to_string(q.offset));
  return order + ", idx ASC";
}

inline void check_id(std::int64_t id, const char* field) {
  if (id <= 0)
    throw std::invalid_argument(std::string(field) + " must be a positive id, got " +
                                std::to_string(id));
}
inline void check_attempt(int attempt, int minimum) {
  if (attempt < minimum)
    throw std::invalid_argument("attempt must be at least " + std::to_string(minimum) + ", got " +
                                std::to_string(attempt));
}
// curves_since's cursor and page size.
inline void check_curve_cursor(std::int64_t after_id, std::int64_t limit) {
  if (after_id < 0)
    throw std::invalid_argument("after_id must not be negative, got " + std::to_string(after_id));
  if (limit < 1 || limit > 10000)
    throw std::invalid_argument("limit must be in 1..10000, got " + std::to_string(limit));
}

inline void check_not_empty(std::string_view value, const char* field) {
  if (value.empty()) throw std::invalid_argument(std::string(field) + " must not be empty");
}

// A trial's weights file to keep: not empty, at most kMaxWeightsBytes.
inline void check_weights(std::string_view bytes) {
  if (bytes.empty()) throw std::invalid_argument("weights: the file is empty");
  if (static_cast<std::int64_t>(bytes.size()) > kMaxWeightsBytes)
    throw std::invalid_argument("weights: " + std::to_string(bytes.size()) +
                                " bytes, more than the " + std::to_string(kMaxWeightsBytes >> 20) +
                                " MiB a trial's weights may take");
}

inline nlohmann::json parse_stored_json(const std::string& text) {
  auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  return j.is_discarded() ? nlohmann::json::object() : j;
}

// Seconds since the Unix epoch, as every stored timestamp (the embedded
// backend reads the same clock through sqlite::unix_now).
inline double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

inline bool is_terminal(TrialStatus s) {
  return s != TrialStatus::queued && s != TrialStatus::running;
}

}  // namespace dnnlab::store::checks
