// The hybrid trainer's network protocol around the binary frames
// (hybrid/wire.hpp): a WebSocket at /hybrid, a text hello carrying the join
// token, a text welcome carrying what a client needs to load its shard (the
// run spec as YAML and a fingerprint of the training split), then binary
// frames both ways; an error is a text message and a close reason.
// docs/distributed.md "Over the network" is the reference; a browser speaks
// the same messages.
//
//   Hello h{.token = token};
//   ws.write(to_json(h));                          // client -> server, text
//   Welcome w = parse_welcome(ws.read());          // server -> client, text
//   ... binary frames: hybrid::encode / hybrid::decode ...
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

#include "nn/tensor.hpp"

namespace dnnlab::hybrid_net {

inline constexpr int kProtocolVersion = 2;  // 2: frames carry the compute time (format 2)
inline constexpr const char* kPath = "/hybrid";
// Before the hello is accepted a connection may send this much at most.
inline constexpr size_t kMaxHelloBytes = 4096;
// WebSocket close reasons hold 123 bytes; longer ones are cut (the full text
// goes first as an error message).
inline constexpr size_t kMaxCloseReason = 123;

// A message of the protocol that breaks its rules: names the field.
class ProtocolError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The identity the server issued a client in its welcome, which the client
// presents in its hello when it connects again to resume its record
// (docs/distributed.md "Identities"). client -1: none (a new identity).
struct Identity {
  int client = -1;
  std::string secret;  // kSecretBytes random bytes as hex
};
inline constexpr size_t kSecretBytes = 32;

struct Hello {
  int v = kProtocolVersion;
  std::string token;
  std::string agent = "dnnlab";  // "dnnlab", "browser": for logs only
  Identity identity;             // optional: "client" and "secret", both or neither
};

struct Welcome {
  int v = kProtocolVersion;
  int client = -1;               // the id the server gave this client (its identity)
  std::string secret;            // presented with `client` in a later hello to resume it
  std::string spec_yaml;         // the run spec, overrides applied (spec::to_yaml)
  std::string data_fingerprint;  // of the training split the tickets index
  int64_t train_rows = 0;        // its sample count
  uint64_t max_frame_bytes = 0;  // the largest binary frame the server reads
  // For browser clients, which read neither YAML nor data set files (both
  // optional, "" when absent; native clients ignore them):
  std::string core_spec_json;  // the spec as the wasm core reads it (a JSON object)
  std::string shard_path;      // where this endpoint serves the training split as a shard
};

std::string to_json(const Hello& h);
std::string to_json(const Welcome& w);
// {"v":1,"type":"error","message":...}
std::string error_json(std::string_view message);

// Strict: the type, v (must be kProtocolVersion), each field's type and
// size. Throws ProtocolError naming the field.
Hello parse_hello(std::string_view text);
// Also takes an error message from the server: throws ProtocolError with it.
Welcome parse_welcome(std::string_view text);

// Equality in time independent of where the strings differ.
bool constant_time_equal(std::string_view a, std::string_view b);

// FNV-1a 64 over the split's shape and values, as 16 hex digits: the client
// checks that the shard it loaded is the server's.
std::string fingerprint(nn::TensorView x);

// "ws://host:port/path" or "wss://host:port/path" split; throws
// ProtocolError naming what is wrong.
struct WsUrl {
  std::string host, port, path;
  bool tls = false;  // wss://
};
WsUrl parse_ws_url(std::string_view url);

// `reason` cut to kMaxCloseReason bytes (at a UTF-8 boundary).
std::string close_reason(std::string_view reason);

}  // namespace dnnlab::hybrid_net
