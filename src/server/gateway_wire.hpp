// Worker protocol v1 on the wire (docs/protocol.md): the frame format, the
// error a broken frame gets, and the field readers that name what is wrong.
// Shared by the gateway's parts; nothing here holds state.
#pragma once
#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "server/gateway.hpp"

namespace dnnlab::server::wire {

using nlohmann::json;

constexpr int kVersion = 1;
constexpr unsigned short kProtocolError = 1002, kPolicy = 1008, kTooBig = 1009, kInternal = 1011;

// A frame that breaks the protocol: the client gets `error` and is closed.
struct Violation {
  unsigned short code;
  std::string kind;  // error code sent to the client
  std::string message;
};

[[noreturn]] void violate(std::string kind, std::string message, unsigned short code = kPolicy);

// The error frame, then a close with the message as its reason.
GatewayReply error_reply(const Violation& v);

// At most `max` bytes of `s`, cut on a UTF-8 character boundary (a cut
// mid-character would make the JSON writer throw).
std::string utf8_prefix(std::string_view s, std::size_t max);

// A WebSocket close reason: at most 123 bytes, valid UTF-8.
std::string truncate_reason(std::string s);

// A server -> client text frame: `j` with "v" set.
std::string frame(json j);

double unix_now();

// Field readers: a wrong or missing field is a violation naming it.
const json& field(const json& msg, const char* type, const char* name);
double number(const json& msg, const char* type, const char* name);
// JSON has no NaN or infinity: browsers send them as null.
double finite_number(const json& msg, const char* type, const char* name);
std::string text(const json& msg, const char* type, const char* name, std::size_t max = 256);
// A finite number in [lo, hi]; outside it is an "out_of_range" violation
// (the gateway refuses the client: no honest client sends one).
double in_range(const json& msg, const char* type, const char* name, double lo, double hi);

// What a browser says it trained on (docs/protocol.md, "progress" and
// "result"): {"backend": "wasm" | "webgpu" | "webgpu→wasm", "adapter":
// {"vendor", "architecture"}} with what the message holds of the two, or an
// empty object. Strings of at most kMaxAdapterText bytes; anything else is
// a violation naming the field. Shown, stored in provenance, never trusted.
constexpr std::size_t kMaxAdapterText = 64;
json backend_report(const json& msg, const char* type);

}  // namespace dnnlab::server::wire
