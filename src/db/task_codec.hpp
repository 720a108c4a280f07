// What a queued task says: which trial of which experiment to run, and the
// queue an experiment's tasks go to. Tasks carry the trial's values (its
// config and seed, a few dozen bytes) and references; the sweep (the
// template) comes from the experiment, data sets by name and hash. A task
// that carries its values spares the worker a store read per trial (two
// round trips on a server store); one without them (an older publisher)
// makes it read the trial. Beside the database plumbing because both ends of the
// queue (the coordinator that publishes, every adapter that leases) read it.
//
//   auto payload = db::encode_task({.experiment_id = 7, .trial_id = 42, .index = 3,
//                                   .config_json = R"({"lr":0.01})", .seed = 99});
//   queue->publish(db::queue_name(7), payload);
//   db::TrialTask t = db::decode_task(lease->payload);  // throws db::ProtocolError
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

namespace dnnlab::db {

struct TrialTask {
  int64_t experiment_id = 0;
  int64_t trial_id = 0;
  int64_t index = 0;
  // A reopened trial (its result was thrown away) is published again with
  // the attempt it had reached: the worker's store attempt is then
  // attempt_base + the queue's delivery attempt, always newer than before.
  int attempt_base = 0;
  int attempt(int delivery) const { return attempt_base + delivery; }
  // The trial's sampled values (store::TrialRecord::config_json, seed), as
  // stored with the trial; empty config: not carried.
  std::string config_json;
  uint64_t seed = 0;
};

// A task payload that cannot be read: names the field or offset.
class ProtocolError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// {"v":1,"experiment":..,"trial":..,"index":..[,"base":..][,"config":{..},"seed":..]}
std::string encode_task(const TrialTask& t);
TrialTask decode_task(std::string_view payload);  // throws ProtocolError

// The queue an experiment's tasks go to ("exp-7").
std::string queue_name(int64_t experiment_id);

}  // namespace dnnlab::db
