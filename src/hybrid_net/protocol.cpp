// The control messages (hello, welcome, error) and their strict parsers.
#include "hybrid_net/protocol.hpp"

#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

#include "hybrid/client_step.hpp"

namespace dnnlab::hybrid_net {
namespace {

using nlohmann::json;

constexpr size_t kMaxTokenChars = 256;
// A secret is 2 x kSecretBytes hex digits; longer is refused before any
// comparison.
constexpr size_t kMaxSecretChars = 128;

json parse_object(std::string_view text, const char* what) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object())
    throw ProtocolError(std::string(what) + ": not a JSON object (" + std::to_string(text.size()) +
                        " bytes)");
  return j;
}

void check_version(const json& j, const char* what) {
  if (!j.contains("v") || !j["v"].is_number_integer())
    throw ProtocolError(std::string(what) + ": 'v' is missing or not an integer");
  const int64_t v = j["v"].get<int64_t>();
  if (v != kProtocolVersion)
    throw ProtocolError(std::string(what) + ": 'v' is " + std::to_string(v) +
                        ", this build speaks " + std::to_string(kProtocolVersion));
}

std::string string_field(const json& j, const char* what, const char* key, size_t max) {
  if (!j.contains(key) || !j[key].is_string())
    throw ProtocolError(std::string(what) + ": '" + key + "' is missing or not a string");
  std::string s = j[key].get<std::string>();
  if (s.size() > max)
    throw ProtocolError(std::string(what) + ": '" + key + "' is longer than " +
                        std::to_string(max) + " bytes");
  return s;
}

template <typename T>
T number_field(const json& j, const char* what, const char* key) {
  if (!j.contains(key) || !j[key].is_number_integer() ||
      (std::is_unsigned_v<T> && j[key].is_number_integer() && !j[key].is_number_unsigned() &&
       j[key].get<int64_t>() < 0))
    throw ProtocolError(std::string(what) + ": '" + key + "' is missing or not an integer");
  return j[key].get<T>();
}

}  // namespace

std::string to_json(const Hello& h) {
  json j{{"v", h.v}, {"type", "hello"}, {"token", h.token}, {"agent", h.agent}};
  if (h.identity.client >= 0) {
    j["client"] = h.identity.client;
    j["secret"] = h.identity.secret;
  }
  return j.dump();
}

std::string to_json(const Welcome& w) {
  json j{{"v", w.v},
         {"type", "welcome"},
         {"client", w.client},
         {"spec", w.spec_yaml},
         {"data_fingerprint", w.data_fingerprint},
         {"train_rows", w.train_rows},
         {"max_frame_bytes", w.max_frame_bytes}};
  if (!w.core_spec_json.empty()) j["core_spec"] = json::parse(w.core_spec_json);
  if (!w.shard_path.empty()) j["shard"] = w.shard_path;
  if (!w.secret.empty()) j["secret"] = w.secret;
  return j.dump();
}

std::string error_json(std::string_view message) {
  return json{{"v", kProtocolVersion}, {"type", "error"}, {"message", std::string(message)}}.dump(
      -1, ' ', false, json::error_handler_t::replace);
}

Hello parse_hello(std::string_view text) {
  const json j = parse_object(text, "hello");
  check_version(j, "hello");
  if (string_field(j, "hello", "type", 32) != "hello")
    throw ProtocolError("hello: 'type' is not \"hello\"");
  Hello h;
  h.token = string_field(j, "hello", "token", kMaxTokenChars);
  if (j.contains("agent")) h.agent = string_field(j, "hello", "agent", 64);
  // An identity is the pair: a client id alone would claim another's record
  // without proof, a secret alone names nothing.
  const bool has_client = j.contains("client"), has_secret = j.contains("secret");
  if (has_client != has_secret)
    throw ProtocolError(has_client ? "hello: 'client' without 'secret'"
                                   : "hello: 'secret' without 'client'");
  if (has_client) {
    const int64_t c = j["client"].is_number_integer() ? j["client"].get<int64_t>() : -1;
    if (c < 0 || c > std::numeric_limits<int>::max())
      throw ProtocolError("hello: 'client' is not a client id (an integer >= 0)");
    h.identity.client = static_cast<int>(c);
    h.identity.secret = string_field(j, "hello", "secret", kMaxSecretChars);
  }
  return h;
}

Welcome parse_welcome(std::string_view text) {
  const json j = parse_object(text, "welcome");
  if (j.contains("type") && j["type"] == "error")
    throw ProtocolError("the server refused: " + string_field(j, "error", "message", 1 << 16));
  check_version(j, "welcome");
  if (string_field(j, "welcome", "type", 32) != "welcome")
    throw ProtocolError("welcome: 'type' is not \"welcome\"");
  Welcome w;
  w.client = number_field<int>(j, "welcome", "client");
  w.spec_yaml = string_field(j, "welcome", "spec", 1 << 20);
  w.data_fingerprint = string_field(j, "welcome", "data_fingerprint", 64);
  w.train_rows = number_field<int64_t>(j, "welcome", "train_rows");
  w.max_frame_bytes = number_field<uint64_t>(j, "welcome", "max_frame_bytes");
  if (j.contains("core_spec")) {
    if (!j["core_spec"].is_object()) throw ProtocolError("welcome: 'core_spec' is not an object");
    w.core_spec_json = j["core_spec"].dump();
  }
  if (j.contains("shard")) w.shard_path = string_field(j, "welcome", "shard", 256);
  if (j.contains("secret")) w.secret = string_field(j, "welcome", "secret", kMaxSecretChars);
  return w;
}

bool constant_time_equal(std::string_view a, std::string_view b) {
  // The length is not secret (tokens have a fixed length); the bytes are.
  unsigned diff = a.size() == b.size() ? 0u : 1u;
  const size_t n = std::max(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? a[i] : 0, y = i < b.size() ? b[i] : 0;
    diff |= static_cast<unsigned>(x ^ y);
  }
  return diff == 0;
}

std::string fingerprint(nn::TensorView x) {
  return hybrid::data_fingerprint(x);
}

WsUrl parse_ws_url(std::string_view url) {
  WsUrl u;
  u.tls = url.substr(0, 6) == "wss://";
  const std::string_view scheme = u.tls ? "wss://" : "ws://";
  if (url.substr(0, scheme.size()) != scheme)
    throw ProtocolError("--join: '" + std::string(url) + "' does not start with ws:// or wss://");
  std::string_view rest = url.substr(scheme.size());
  const size_t slash = rest.find('/');
  const std::string_view authority = rest.substr(0, slash);
  u.path = slash == std::string_view::npos ? "/" : std::string(rest.substr(slash));
  const size_t colon = authority.rfind(':');
  if (colon == std::string_view::npos || colon + 1 == authority.size())
    throw ProtocolError("--join: '" + std::string(url) +
                        "' has no port (ws://HOST:PORT/hybrid or wss://HOST:PORT/hybrid)");
  u.host = std::string(authority.substr(0, colon));
  u.port = std::string(authority.substr(colon + 1));
  if (u.host.size() > 2 && u.host.front() == '[' && u.host.back() == ']')
    u.host = u.host.substr(1, u.host.size() - 2);
  if (u.host.empty()) throw ProtocolError("--join: '" + std::string(url) + "' has no host");
  for (char c : u.port)
    if (c < '0' || c > '9')
      throw ProtocolError("--join: the port '" + u.port + "' is not a number");
  return u;
}

std::string close_reason(std::string_view reason) {
  if (reason.size() <= kMaxCloseReason) return std::string(reason);
  size_t n = kMaxCloseReason;
  while (n > 0 && (static_cast<unsigned char>(reason[n]) & 0xC0) == 0x80) --n;
  return std::string(reason.substr(0, n));
}

}  // namespace dnnlab::hybrid_net
