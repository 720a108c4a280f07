// Files through the API: the dashboard (everything no other route takes), the
// join page and its WebSocket upgrade, the gateway's content-hashed files.
#include "server/api.hpp"
#include "server/static_files.hpp"

namespace dnnlab::server {

namespace {
ApiResponse from_static(StaticReply s) {
  ApiResponse resp;
  resp.status = s.status;
  resp.content_type = s.content_type;
  resp.body = std::move(s.body);
  return resp;
}
}  // namespace

ApiResponse Api::static_file(const Call& c) {
  return from_static(serve_static(config_.web_root, c.path));
}

ApiResponse Api::join_page(const Call&) {
  return from_static(serve_static(config_.web_root, "/join.html"));
}

ApiResponse Api::join_socket(const Call&) {
  ApiResponse resp;
  resp.status = 101;
  resp.upgrade = Upgrade::join;
  return resp;
}

// The wasm core and data shards: content-hashed names, cached for good.
ApiResponse Api::gateway_file(const Call& c) {
  std::optional<ServedFile> f;
  if (config_.gateway_file) f = config_.gateway_file(c.path);
  ApiResponse resp;
  if (!f || !f->body) {
    resp.status = 404;
    resp.content_type = "text/plain; charset=utf-8";
    resp.body = "not found\n";
    return resp;
  }
  resp.content_type = f->content_type;
  resp.body = *f->body;
  resp.immutable = true;
  return resp;
}

}  // namespace dnnlab::server
