// HTTP requests into the API router: raw bytes through Beast's request parser
// (as the server reads them), then Api::handle over a real SQLite store. Every
// request gets a response (Api::handle never throws); the process never dies.
#include <unistd.h>

#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket/rfc6455.hpp>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include "db/connections.hpp"
#include "queue/task_queue.hpp"
#include "server/api.hpp"
#include "store/result_store.hpp"

namespace http = boost::beast::http;
using namespace dnnlab;

namespace {

struct World {
  std::string dir;
  std::unique_ptr<queue::TaskQueue> queue;
  std::unique_ptr<store::ResultStore> store;
  std::unique_ptr<server::ExperimentRunner> runner;
  server::HttpMetrics metrics;
  std::unique_ptr<server::Api> api;

  World() {
    dir = "/tmp/dnnlab-fuzz-http-" + std::to_string(getpid());
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir + "/web");
    const std::string url = "sqlite:" + dir + "/fuzz.db";
    db::Connections shared;
    queue = queue::open_task_queue(url, {}, &shared);
    store = store::open_result_store(url, &shared);
    runner = std::make_unique<server::ExperimentRunner>(*store, *queue, false);
    api = std::make_unique<server::Api>(*store, *runner, metrics,
                                        server::ApiConfig{"fuzz-token", true, dir + "/web", {}});
  }
  ~World() { std::filesystem::remove_all(dir); }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static World w;
  http::request_parser<http::string_body> parser;
  parser.header_limit(8 * 1024);
  parser.body_limit(1 << 20);
  boost::beast::error_code ec;
  parser.put(boost::asio::buffer(data, size), ec);
  if (ec || !parser.is_done()) return 0;
  auto req = parser.release();
  server::ApiRequest a;
  a.method = std::string(req.method_string());
  a.target = std::string(req.target());
  a.authorization = std::string(req[http::field::authorization]);
  a.websocket = boost::beast::websocket::is_upgrade(req);
  if (!a.websocket) a.body = std::move(req.body());
  server::ApiResponse r = w.api->handle(a);
  if (r.deferred) r = r.deferred(*w.store);
  if (r.background) r = r.background()();  // the server runs the halves on two threads
  if (r.status < 100 || r.status > 599) __builtin_trap();
  return 0;
}
