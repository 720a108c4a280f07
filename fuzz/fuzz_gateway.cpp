// Worker-protocol v1 frames into the gateway, as a stranger's connection sends
// them: the input is a script of frames, each [kind: 1 byte][length: 2 bytes,
// little-endian][payload]. kind % 4: 0 text, 1 binary, 2 the connection ends
// and a new one opens, 3 poll(). Every frame gets a reply (the gateway never
// throws); close reasons fit a WebSocket close frame; the process never dies.
// The store holds one running experiment, so hello, request, progress and
// result reach their real paths.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include "db/connections.hpp"
#include "queue/task_queue.hpp"
#include "server/gateway.hpp"
#include "store/result_store.hpp"

using namespace dnnlab;

namespace {

constexpr const char* kJoinToken = "fuzz-join-token-0123456789abcdef0123456789";

struct World {
  std::string dir;
  std::unique_ptr<queue::TaskQueue> queue;
  std::unique_ptr<store::ResultStore> store;
  std::unique_ptr<server::Gateway> gateway;

  World() {
    dir = "/tmp/dnnlab-fuzz-gateway-" + std::to_string(getpid());
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    const std::string url = "sqlite:" + dir + "/fuzz.db";
    db::Connections shared;
    queue = queue::open_task_queue(url, {}, &shared);
    store = store::open_result_store(url, &shared);
    server::GatewayOptions o;
    o.join_token = kJoinToken;
    o.store_url = o.broker_url = url;
    o.secret = "fuzz-secret";
    o.verify_fraction = 0;  // no native re-runs: they would train for real
    o.trust_after = 0;
    o.hellos_per_minute = 1 << 30;
    gateway = std::make_unique<server::Gateway>(*store, *queue, o);
  }
  ~World() {
    gateway.reset();
    std::filesystem::remove_all(dir);
  }
};

void check(const server::GatewayReply& r) {
  if (r.close && r.reason.size() > 123) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static World w;
  server::Gateway::ClientId id = w.gateway->open("127.0.0.1:5000");
  size_t at = 0;
  while (at + 3 <= size) {
    const int kind = data[at] % 4;
    const size_t len = std::min<size_t>(data[at + 1] | (data[at + 2] << 8), size - at - 3);
    const std::string_view frame(reinterpret_cast<const char*>(data + at + 3), len);
    at += 3 + len;
    if (kind == 0) check(w.gateway->on_text(id, frame));
    if (kind == 1) check(w.gateway->on_binary(id, frame));
    if (kind == 2) {
      w.gateway->close(id);
      id = w.gateway->open("127.0.0.1:5001");
    }
    if (kind == 3)
      for (const auto& [who, reply] : w.gateway->poll()) check(reply);
  }
  w.gateway->close(id);
  return 0;
}
