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
// 7 forever), and a counter row locked until commit (schema 7) made every
// event-writing transaction of every worker commit one at a time. So (schema
// 8) writers insert their events into `event_inbox` without an id, and the
// readers (events_since, events_of_type, append_event) first run the
// sequencer: under one advisory lock, held to its commit, it moves the
// committed inbox rows into `events`, numbered after the last id given
// (`event_cursor`). Rows of transactions still open are invisible to it and
// get later, higher ids: ids are in the order events became readable.
// Trial counts likewise: writers insert `trial_count_deltas`, readers fold them.
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

// trial.provisional: set_provisional's change, which moves what the trial's
// epochs count for (ResultStore::curves_since follows it).
inline nlohmann::json provisional(std::int64_t experiment, std::int64_t trial, int attempt,
                                  bool provisional) {
  return {{"experiment", experiment},
          {"trial", trial},
          {"attempt", attempt},
          {"provisional", provisional}};
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
