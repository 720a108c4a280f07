// The seam between the hybrid server and its clients: frames (wire.hpp) in
// order per client, a departure as an event. The in-process hub below joins
// native client threads; a WebSocket transport (browsers, `dnnlab worker
// --join`) is to implement the same two interfaces.
//
//   hybrid::InProcessHub hub;
//   std::unique_ptr<hybrid::ClientTransport> link = hub.connect();  // client 0
//   std::thread t([&] { run_client(*link, ...); });
//   hub.send(0, encode(frame));
//   auto in = hub.receive(deadline);   // {client, bytes} or {client, left}
#pragma once
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "hybrid/wire.hpp"

namespace dnnlab::hybrid {

using Clock = std::chrono::steady_clock;

// What the server hears: a frame from a client, that the client left, or
// that a client which left is back on a new link (a network transport that
// resumes an identity, docs/distributed.md "Identities"): it keeps its id
// and its record, but holds no weights and no ticket.
struct Inbound {
  int client = -1;
  Bytes frame;
  bool left = false;
  bool back = false;
};

class ServerTransport {
 public:
  virtual ~ServerTransport() = default;
  // How many clients have connected (ids 0 .. count-1).
  virtual int clients() const = 0;
  // Queues a frame for one client; false when that client is gone.
  virtual bool send(int client, Bytes frame) = 0;
  // The next frame or departure from any client, in the order each client
  // sent them; nullopt when `deadline` passes first.
  virtual std::optional<Inbound> receive(Clock::time_point deadline) = 0;
  // Ends a client's link (quarantine, end of run); its receive() ends.
  virtual void disconnect(int client) = 0;
  // Ends a quarantined client's link for a reason it is told (a network
  // transport sends it as the close reason, and refuses the client's
  // identity from then on); by default, as disconnect().
  virtual void expel(int client, const std::string& reason) {
    (void)reason;
    disconnect(client);
  }
};

class ClientTransport {
 public:
  virtual ~ClientTransport() = default;
  virtual bool send(Bytes frame) = 0;  // false once the link is closed
  // The next frame from the server; nullopt at the deadline or once closed.
  virtual std::optional<Bytes> receive(Clock::time_point deadline) = 0;
  virtual bool closed() const = 0;
  virtual void close() = 0;  // leave: the server hears Inbound::left
};

// Queues between threads of one process. Thread-safe.
class InProcessHub : public ServerTransport {
 public:
  InProcessHub();
  ~InProcessHub() override;
  std::unique_ptr<ClientTransport> connect();

  int clients() const override;
  bool send(int client, Bytes frame) override;
  std::optional<Inbound> receive(Clock::time_point deadline) override;
  void disconnect(int client) override;

  struct Shared;  // defined in transport.cpp

 private:
  std::shared_ptr<Shared> shared_;
};

}  // namespace dnnlab::hybrid
