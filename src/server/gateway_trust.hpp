// Trust in browser clients: who is quarantined (rebuilt from the store's
// worker.quarantined events, so it outlives the process) and which results
// are re-run natively.
#pragma once
#include <cstdint>
#include <set>
#include <string>

#include "store/result_store.hpp"

namespace dnnlab::server {

class TrustBook {
 public:
  TrustBook(store::ResultStore& store, double verify_fraction);

  bool quarantined(const std::string& client_key) const {
    return quarantined_keys_.count(client_key) > 0;
  }
  // Records the quarantine (event worker.quarantined); false when the worker
  // was already quarantined.
  bool quarantine(const std::string& worker_id, const std::string& client_key,
                  std::int64_t trial_id, const std::string& reason);

  // Whether this result is re-run natively.
  bool chosen_for_verification(std::int64_t trial_id) const;

 private:
  store::ResultStore& store_;
  double verify_fraction_;
  std::set<std::string> quarantined_keys_, quarantined_workers_;
};

}  // namespace dnnlab::server
