// Quarantine and the choice of results to verify (gateway_trust.hpp).
#include "server/gateway_trust.hpp"

namespace dnnlab::server {

TrustBook::TrustBook(store::ResultStore& store, double verify_fraction)
    : store_(store), verify_fraction_(verify_fraction) {
  // Quarantines outlive the process: they are rebuilt from the store.
  for (const auto& e : store.events_of_type("worker.quarantined")) {
    if (e.data.contains("client") && e.data["client"].is_string())
      quarantined_keys_.insert(e.data["client"].get<std::string>());
    if (e.data.contains("worker") && e.data["worker"].is_string())
      quarantined_workers_.insert(e.data["worker"].get<std::string>());
  }
}

bool TrustBook::quarantine(const std::string& worker_id, const std::string& client_key,
                           std::int64_t trial_id, const std::string& reason) {
  if (!quarantined_workers_.insert(worker_id).second) return false;
  quarantined_keys_.insert(client_key);
  // The event is the record: a restarted gateway refuses the client too.
  store_.append_event(
      "worker.quarantined",
      {{"worker", worker_id}, {"client", client_key}, {"trial", trial_id}, {"reason", reason}});
  return true;
}

// Deterministic: splitmix64 of the trial id.
bool TrustBook::chosen_for_verification(std::int64_t trial_id) const {
  const double fraction = verify_fraction_;
  if (fraction <= 0) return false;
  if (fraction >= 1) return true;
  std::uint64_t z = static_cast<std::uint64_t>(trial_id) + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * 0x1.0p-53 < fraction;
}

}  // namespace dnnlab::server
