// A native client's side of the hybrid trainer over WebSocket
// (`dnnlab join URL --token T`): connects, says hello, reads the welcome,
// then is a hybrid::ClientTransport for hybrid::run_client. An io thread of
// its own moves the bytes. A wss:// URL verifies the server's certificate
// (the system's CAs, or `tls_ca`) and the host name in it; never skipped.
//
//   auto link = hybrid_net::ClientLink::join("ws://127.0.0.1:8470/hybrid", token);
//   auto tls = hybrid_net::ClientLink::join("wss://lab.example:8470/hybrid", token, "ca.pem");
//   const hybrid_net::Welcome& w = link->welcome();    // spec, data fingerprint
//   auto again = hybrid_net::ClientLink::join(url, token, "", 10s, link->identity());
//   hybrid::run_client(*link, spec.model, input, classes, seed, shard, {});
//   if (!link->close_reason().empty()) ...             // why the server closed it
//   if (link->lost()) ... join again with link->identity() ...  // no word from the server
#pragma once
#include <chrono>
#include <memory>
#include <string>
#include <utility>  // first: Boost 1.74's asio/awaitable.hpp uses std::exchange unincluded

#include "hybrid/transport.hpp"
#include "hybrid_net/protocol.hpp"

namespace dnnlab::hybrid_net {

// The server answered the hello (or the upgrade) with a refusal: its
// message, and the WebSocket close code that followed it (1008 a broken
// rule or a refused identity, 1013 "try again later": the identity is
// connected already, or the run is full) or the HTTP status of a refused
// upgrade; 0 when the connection ended before a close frame.
class Refused : public ProtocolError {
 public:
  Refused(const std::string& message, int code) : ProtocolError(message), code_(code) {}
  int code() const { return code_; }

 private:
  int code_;
};

class ClientLink : public hybrid::ClientTransport {
 public:
  // Throws Refused (the server's refusal with its reason), ProtocolError (a
  // bad URL or welcome) or std::runtime_error (cannot connect, the server's
  // certificate is not trusted or does not name the host, no welcome within
  // `timeout`).
  // `tls_ca` (wss:// only): a PEM file of the CA or self-signed certificate
  // to trust instead of the system's CAs; std::invalid_argument naming
  // --tls-ca when it cannot be loaded. `identity` (from an earlier link's
  // identity()): resume it, its record kept; the server refuses one that is
  // quarantined, unknown or connected already (docs/distributed.md
  // "Identities"). None: a new identity.
  static std::unique_ptr<ClientLink> join(
      const std::string& url, const std::string& token, const std::string& tls_ca = "",
      std::chrono::milliseconds timeout = std::chrono::milliseconds(10000),
      const Identity& identity = {});
  ~ClientLink() override;

  const Welcome& welcome() const;
  // The identity the server gave this client (or resumed): keep it to
  // connect again as the same client.
  Identity identity() const;
  // The server's close reason (and error message, if it sent one), once closed.
  std::string close_reason() const;
  // Once closed: true when the link ended without a word from the server (a
  // reset, an end of stream, a timeout: no close frame, no error message),
  // which a reconnect with identity() may resume; false after the server's
  // close (the run's end, a quarantine) or this side's.
  bool lost() const;

  bool send(hybrid::Bytes frame) override;
  std::optional<hybrid::Bytes> receive(hybrid::Clock::time_point deadline) override;
  bool closed() const override;
  void close() override;

  struct Impl;

 private:
  explicit ClientLink(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace dnnlab::hybrid_net
