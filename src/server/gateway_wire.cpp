// Worker protocol v1 on the wire: errors and field readers (gateway_wire.hpp).
#include "server/gateway_wire.hpp"

#include <chrono>
#include <cmath>

namespace dnnlab::server::wire {

void violate(std::string kind, std::string message, unsigned short code) {
  throw Violation{code, std::move(kind), std::move(message)};
}

std::string utf8_prefix(std::string_view s, std::size_t max) {
  if (s.size() <= max) return std::string(s);
  std::size_t n = max;
  // Back up over continuation bytes to the lead byte, which is dropped too.
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  return std::string(s.substr(0, n));
}

std::string truncate_reason(std::string s) {
  if (s.size() > 123) s = utf8_prefix(s, 120) + "...";
  return s;
}

GatewayReply error_reply(const Violation& v) {
  GatewayReply r;
  r.frames.push_back(frame({{"type", "error"}, {"code", v.kind}, {"message", v.message}}));
  r.close = true;
  r.close_code = v.code;
  r.reason = truncate_reason(v.message);
  return r;
}

std::string frame(json j) {
  j["v"] = kVersion;
  // Replace rather than throw: a message quoting a client string stays sendable.
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

const json& field(const json& msg, const char* type, const char* name) {
  auto it = msg.find(name);
  if (it == msg.end()) violate("bad_message", std::string(type) + ": missing field '" + name + "'");
  return *it;
}

double number(const json& msg, const char* type, const char* name) {
  const json& v = field(msg, type, name);
  if (!v.is_number())
    violate("bad_message", std::string(type) + ": '" + name + "' must be a number");
  return v.get<double>();
}

double finite_number(const json& msg, const char* type, const char* name) {
  if (auto it = msg.find(name); it != msg.end() && it->is_null())
    violate("non_finite", std::string(type) + ": non-finite result ('" + name + "' is null)");
  double d = number(msg, type, name);
  if (!std::isfinite(d))
    violate("non_finite", std::string(type) + ": non-finite result ('" + name + "')");
  return d;
}

std::string text(const json& msg, const char* type, const char* name, std::size_t max) {
  const json& v = field(msg, type, name);
  if (!v.is_string())
    violate("bad_message", std::string(type) + ": '" + name + "' must be a string");
  std::string s = v.get<std::string>();
  if (s.size() > max)
    violate("bad_message", std::string(type) + ": '" + name + "' is longer than " +
                               std::to_string(max) + " characters");
  return s;
}

json backend_report(const json& msg, const char* type) {
  json out = json::object();
  if (msg.contains("backend")) {
    const std::string b = text(msg, type, "backend", 32);
    if (b != "wasm" && b != "webgpu" && b != "webgpu\u2192wasm")
      violate("bad_message", std::string(type) +
                                 ": 'backend' must be wasm, webgpu or webgpu\u2192wasm, not '" +
                                 utf8_prefix(b, 32) + "'");
    out["backend"] = b;
  }
  if (msg.contains("adapter")) {
    const json& a = msg["adapter"];
    const std::string where = std::string(type) + ".adapter";
    if (!a.is_object()) violate("bad_message", std::string(type) + ": 'adapter' must be an object");
    json kept = json::object();
    for (const char* key : {"vendor", "architecture"})
      if (a.contains(key)) kept[key] = text(a, where.c_str(), key, kMaxAdapterText);
    out["adapter"] = std::move(kept);
  }
  return out;
}

double in_range(const json& msg, const char* type, const char* name, double lo, double hi) {
  const double d = finite_number(msg, type, name);
  if (d < lo || d > hi)
    violate("out_of_range", std::string(type) + ": '" + name + "' " + json(d).dump() +
                                " is outside [" + json(lo).dump() + ", " +
                                (std::isinf(hi) ? std::string("inf") : json(hi).dump()) + "]");
  return d;
}

}  // namespace dnnlab::server::wire
