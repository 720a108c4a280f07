// The events and counts a trial's state changes produce, written by the store
// backends in code, in the same transaction as the change (they used to be
// SQLite triggers; PostgreSQL gets the very same rows from the same code).
//
//   if (started) append(kind::started, started_event(exp, trial, index, worker, attempt));
//
// The events cursor (EventRecord::id, what the dashboard resumes from) must
// be commit-ordered: a reader that has seen id N must never later find an
// event with an id below N. SQLite has one writer at a time, so AUTOINCREMENT
// ids are commit-ordered by construction. PostgreSQL sequences are not (two
// transactions take ids 7 and 8; 8 commits first; a reader that saw 8 skips
// 7 forever), so the PostgreSQL store allocates ids from a one-row counter
// (`event_cursor`) updated in the writing transaction: its row lock is held
// until commit, so the next writer takes its id only after this one
// committed or rolled back. The cost is that event-writing transactions
// commit one at a time; they are short (a trial's end, one epoch), and a
// store that writes per epoch in batches takes the lock once per batch.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace dnnlab::store::trial_events {

inline nlohmann::json started(std::int64_t experiment, std::int64_t trial, std::int64_t index,
                              std::string_view worker, int attempt) {
  return {{"experiment", experiment},
          {"trial", trial},
          {"index", index},
          {"worker", worker},
          {"attempt", attempt}};
}

// trial.finished / trial.pruned / trial.failed (not cancelled: cancel_trials
// writes trial.cancelled for the running ones itself).
inline nlohmann::json ended(std::int64_t experiment, std::int64_t trial, std::int64_t index,
                            std::optional<double> val_acc, std::int64_t epochs,
                            std::string_view error) {
  return {{"experiment", experiment},
          {"trial", trial},
          {"index", index},
          {"val_acc", val_acc ? nlohmann::json(*val_acc) : nlohmann::json()},
          {"epochs", epochs},
          {"error", error}};
}

inline nlohmann::json epoch(std::int64_t experiment, std::int64_t trial, std::int64_t epoch,
                            std::optional<double> val_acc, std::optional<double> train_loss) {
  return {{"experiment", experiment},
          {"trial", trial},
          {"epoch", epoch},
          {"val_acc", val_acc ? nlohmann::json(*val_acc) : nlohmann::json()},
          {"train_loss", train_loss ? nlohmann::json(*train_loss) : nlohmann::json()}};
}

inline nlohmann::json cancelled(std::int64_t experiment, std::int64_t trial, std::int64_t index,
                                std::string_view worker, int attempt, std::int64_t epochs) {
  return {{"experiment", experiment}, {"trial", trial},     {"index", index},
          {"worker", worker},         {"attempt", attempt}, {"epochs", epochs}};
}

// Whether mark_running may (re)start a trial in `status` at `current`
// attempt on `current_worker` with `attempt` on `worker`, and whether that is
// a start (an event, a worker's current trial) or the holder's retry.
struct StartDecision {
  bool allowed = false;
  bool is_start = false;
};
inline StartDecision decide_start(std::string_view status, int current,
                                  std::string_view current_worker, int attempt,
                                  std::string_view worker) {
  if (status == "queued") return {attempt >= current, attempt >= current};
  if (status != "running") return {};
  if (attempt > current) return {true, true};
  if (attempt == current && worker == current_worker) return {true, false};
  return {};
}

}  // namespace dnnlab::store::trial_events
