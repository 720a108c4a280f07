// /api/events: the event log as plain JSON, and the WebSocket stream's upgrade;
// the event encoder the stream shares.
#include <limits>

#include "server/api_internal.hpp"

namespace dnnlab::server {

using namespace api_detail;
using nlohmann::json;

bool Api::event_has_private_fields(const store::EventRecord& e) {
  return e.type == "worker.joined" && e.data.is_object() && e.data.contains("agent");
}

json Api::event_json(const store::EventRecord& e, bool private_fields) {
  json out = {{"id", e.id}, {"time", e.time}, {"type", e.type}, {"data", e.data}};
  // A browser's User-Agent, as its address on /api/workers, is for token holders.
  if (!private_fields && event_has_private_fields(e)) out["data"].erase("agent");
  return out;
}

ApiResponse Api::events(const Call& c) {
  const auto& query = c.query;
  std::int64_t after = 0, limit = 1000;
  if (auto it = query.find("after"); it != query.end())
    after = parse_int(it->second, "after", 0, std::numeric_limits<std::int64_t>::max());
  if (auto it = query.find("limit"); it != query.end())
    limit = parse_int(it->second, "limit", 1, 10000);
  json list = json::array();
  std::int64_t last = after;
  for (const auto& e : c.store.events_since(after, limit)) {
    last = e.id;
    list.push_back(event_json(e, c.token_holder));
  }
  return json_response(200, {{"events", std::move(list)}, {"last_id", last}});
}

// The WebSocket stream: events from the moment of connecting, or after ?after=ID.
ApiResponse Api::events_socket(const Call& c) {
  ApiResponse resp;
  resp.status = 101;
  resp.upgrade = Upgrade::events;
  resp.private_fields = c.token_holder;
  if (auto it = c.query.find("after"); it != c.query.end())
    resp.events_after = parse_int(it->second, "after", 0, std::numeric_limits<std::int64_t>::max());
  return resp;
}

}  // namespace dnnlab::server
