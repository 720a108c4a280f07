// /api/workers: native and browser workers; a volunteer's address for token
// holders only.
#include <algorithm>
#include <chrono>

#include "server/api_internal.hpp"

namespace dnnlab::server {

using namespace api_detail;
using nlohmann::json;

namespace {

// How long a worker that left stays in the default listing (?gone=recent):
// the dashboard's workers page shows it as "gone" for as long.
constexpr double kRecentlyGoneSeconds = 600.0;
// ?gone=all lists at most this many departed workers, the latest first.
constexpr std::size_t kMaxGoneListed = 1000;

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

// Workers that have not left, and those that left: within the last 10 minutes
// (?gone=recent, the default), none (?gone=none) or the latest 1,000
// (?gone=all). Native workers' rows stay in the store for the trials' records;
// "gone_omitted" counts the departed ones not listed.
// A volunteer's address (a browser worker's host) is shown to token holders
// only: public readers get the rows without "host".
ApiResponse Api::workers(const Call& c) {
  enum class Gone { none, recent, all } mode = Gone::recent;
  if (auto it = c.query.find("gone"); it != c.query.end()) {
    if (it->second == "none")
      mode = Gone::none;
    else if (it->second == "all")
      mode = Gone::all;
    else if (it->second != "recent")
      throw ApiError{400, "gone must be recent, all or none, not '" + it->second + "'", "gone"};
  }
  std::vector<store::WorkerRecord> all = c.store.workers();
  std::vector<const store::WorkerRecord*> listed, gone;
  const double recent_after = now_seconds() - kRecentlyGoneSeconds;
  for (const auto& w : all) {
    if (!w.gone)
      listed.push_back(&w);
    else if (mode == Gone::all || (mode == Gone::recent && w.last_seen >= recent_after))
      gone.push_back(&w);
  }
  std::size_t departed = 0;
  for (const auto& w : all) departed += w.gone;
  if (gone.size() > kMaxGoneListed) {
    std::partial_sort(gone.begin(), gone.begin() + kMaxGoneListed, gone.end(),
                      [](auto* a, auto* b) { return a->last_seen > b->last_seen; });
    gone.resize(kMaxGoneListed);
  }
  listed.insert(listed.end(), gone.begin(), gone.end());
  // What a connected browser said it trains on (backend, adapter): display only.
  const json backends = config_.worker_backends ? config_.worker_backends() : json::object();
  json list = json::array();
  for (const auto* w : listed) {
    json row = {{"id", w->id},
                {"kind", store::to_string(w->kind)},
                {"pid", w->pid},
                {"started_at", w->started_at},
                {"last_seen", w->last_seen},
                {"current_trial", w->current_trial ? json(*w->current_trial) : json(nullptr)},
                {"gone", w->gone}};
    if (c.token_holder) row["host"] = w->host;
    if (auto b = backends.find(w->id); b != backends.end() && !w->gone) {
      if (b->contains("backend")) row["backend"] = (*b)["backend"];
      if (b->contains("adapter")) row["adapter"] = (*b)["adapter"];
    }
    list.push_back(std::move(row));
  }
  return json_response(200,
                       {{"workers", std::move(list)}, {"gone_omitted", departed - gone.size()}});
}

}  // namespace dnnlab::server
