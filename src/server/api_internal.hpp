// What the API's files (api.cpp and the api_*.cpp handlers) share; private to
// src/server: the error that ends a request, JSON replies, parameter checks.
#pragma once
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "server/api.hpp"
#include "store/result_store.hpp"

namespace dnnlab::server::api_detail {

// An error that ends a request: status, message and the offending field.
struct ApiError {
  unsigned status;
  std::string message;
  std::string field;
};

inline ApiResponse json_response(unsigned status, const nlohmann::json& body) {
  ApiResponse r;
  r.status = status;
  r.body = body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return r;
}

inline ApiResponse error_response(unsigned status, const std::string& message,
                                  const std::string& field = {}) {
  nlohmann::json j = {{"error", message}};
  if (!field.empty()) j["field"] = field;
  return json_response(status, j);
}

inline nlohmann::json opt(const std::optional<double>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

// A whole decimal integer in [lo, hi], or ApiError 400 naming `field`.
std::int64_t parse_int(std::string_view s, std::string_view field, std::int64_t lo,
                       std::int64_t hi);

// Trial counts: as JSON, summed over experiments, one state's.
nlohmann::json counts_json(const store::TrialCounts& c);
void add(store::TrialCounts& a, const store::TrialCounts& b);
std::int64_t count_of(const store::TrialCounts& c, store::TrialStatus s);

}  // namespace dnnlab::server::api_detail
