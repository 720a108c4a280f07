// The task payload codec: versioned JSON, every field checked by name.
#include "db/task_codec.hpp"

#include <nlohmann/json.hpp>

namespace dnnlab::db {

std::string encode_task(const TrialTask& t) {
  nlohmann::json j{
      {"v", 1}, {"experiment", t.experiment_id}, {"trial", t.trial_id}, {"index", t.index}};
  if (t.attempt_base) j["base"] = t.attempt_base;
  if (!t.config_json.empty()) {
    // Stored config text is JSON the store wrote; parsed here so the payload
    // stays one JSON document (and a bad one fails at the publisher).
    j["config"] = nlohmann::json::parse(t.config_json);
    j["seed"] = t.seed;
  }
  return j.dump();
}

TrialTask decode_task(std::string_view payload) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(payload);
  } catch (const nlohmann::json::parse_error& e) {
    throw ProtocolError("task payload is not JSON at byte " + std::to_string(e.byte));
  }
  if (!j.is_object()) throw ProtocolError("task payload is not a JSON object");
  if (j.value("v", 0) != 1) throw ProtocolError("task payload: 'v' must be 1");
  TrialTask t;
  for (auto [field, out] : {std::pair{"experiment", &t.experiment_id},
                            std::pair{"trial", &t.trial_id}, std::pair{"index", &t.index}}) {
    auto it = j.find(field);
    if (it == j.end() || !it->is_number_integer())
      throw ProtocolError(std::string("task payload: '") + field + "' must be an integer");
    *out = it->get<int64_t>();
  }
  if (auto it = j.find("base"); it != j.end()) {
    if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() > 1000000)
      throw ProtocolError("task payload: 'base' must be an integer in [0, 1000000]");
    t.attempt_base = it->get<int>();
  }
  if (auto it = j.find("config"); it != j.end()) {
    if (!it->is_object()) throw ProtocolError("task payload: 'config' must be an object");
    auto seed = j.find("seed");
    if (seed == j.end() || !seed->is_number_unsigned())
      throw ProtocolError("task payload: 'seed' must be an unsigned integer when 'config' is set");
    t.config_json = it->dump();
    t.seed = seed->get<uint64_t>();
  }
  return t;
}

std::string queue_name(int64_t experiment_id) {
  return "exp-" + std::to_string(experiment_id);
}

}  // namespace dnnlab::db
