// /api/workers: native and browser workers; a volunteer's address for token
// holders only.
#include "server/api_internal.hpp"

namespace dnnlab::server {

using namespace api_detail;
using nlohmann::json;

// A volunteer's address (a browser worker's host) is shown to token holders
// only: public readers get the rows without "host".
ApiResponse Api::workers(const Call& c) {
  json list = json::array();
  for (const auto& w : c.store.workers()) {
    json row = {{"id", w.id},
                {"kind", store::to_string(w.kind)},
                {"pid", w.pid},
                {"started_at", w.started_at},
                {"last_seen", w.last_seen},
                {"current_trial", w.current_trial ? json(*w.current_trial) : json(nullptr)},
                {"gone", w.gone}};
    if (c.token_holder) row["host"] = w.host;
    list.push_back(std::move(row));
  }
  return json_response(200, {{"workers", std::move(list)}});
}

}  // namespace dnnlab::server
