// The trial's JSON encoders: trial_json (nlohmann, with the curve for
// GET /api/trials/{id}) and append_trial_json (the trial list's rows).
#pragma once
#include <charconv>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "store/result_store.hpp"

namespace dnnlab::server {

nlohmann::json trial_json(const store::TrialRecord& t, bool with_curve);
// The same object as trial_json(t, false), written straight into `out`: the
// trial list is the hot path, and building nlohmann trees was most of its time.
void append_trial_json(std::string& out, const store::TrialRecord& t);

// `s` as a JSON string (quoted, escaped; non-ASCII text checked by nlohmann).
void append_json_string(std::string& out, std::string_view s);

template <typename Int>
void append_json_int(std::string& out, Int v) {
  char buf[24];
  auto [p, ec] = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, p);
}

}  // namespace dnnlab::server
