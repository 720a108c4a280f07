// Trust in browser clients (DESIGN.md, "Trust"):
// - identities are issued by the server: a random id and an HMAC of it under
//   the server's secret, so a client can neither choose one nor use another's
//   (the id is public in /api/workers, the MAC never is);
// - quarantine sticks to identities and is rebuilt from the store's
//   worker.quarantined events, so it outlives the process;
// - adaptive replication as in BOINC: an identity's results are all re-run
//   natively until `trust_after` agreed, then a fraction halving with each
//   result down to `verify_fraction`, drawn with the secret after the
//   result arrived;
// - the record of what a client cost: re-runs pending, failures a re-run did
//   not confirm, tickets abandoned in a row.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>

#include "server/gateway.hpp"
#include "store/result_store.hpp"

namespace dnnlab::server {

// HMAC-SHA256 (RFC 2104) as lower-case hex.
std::string hmac_sha256_hex(std::string_view key, std::string_view message);

class TrustBook {
 public:
  TrustBook(store::ResultStore& store, const GatewayOptions& opt);

  // ---- identities ----
  struct Identity {
    std::string id;          // public: the worker id is "browser-<id>"
    std::string credential;  // "<id>.<mac>": what the client keeps and sends back
  };
  Identity issue() const;
  // The identity a credential proves, or nullopt (forged, or not ours).
  std::optional<std::string> identity_of(std::string_view credential) const;

  // ---- quarantine ----
  bool quarantined(const std::string& id) const { return quarantined_.count(id) > 0; }
  // Records it (event worker.quarantined); false when it already was.
  bool quarantine(const std::string& id, const std::string& worker_id, std::int64_t trial_id,
                  const std::string& reason);

  // ---- adaptive replication ----
  bool trusted(const std::string& id) const;
  // Whether this result is re-run natively: all of an untrusted identity's;
  // then, for its k-th result since it became trusted (k = 0, 1, ...), with
  // probability max(verify_fraction, 2^-(k+1)); with trust_after 0, just
  // verify_fraction. Call once per result.
  bool choose_for_verification(const std::string& id, std::int64_t trial_id, int attempt);
  void agreed(const std::string& id) { ++records_[id].agreed; }
  // How many results this identity may have awaiting verification: for an
  // untrusted one, the agreements it still lacks (at least 1), so that its
  // next results wait until the record is decided instead of all being
  // re-run as untrusted ones (at load, the lag behind the verifier pushed the
  // steady-state overhead from ~7% to 13%); `cap` once it is trusted.
  int pending_cap(const std::string& id, int cap) const;

  // ---- what a client costs ----
  int& pending_verifications(const std::string& id) { return records_[id].pending; }
  // A failure the native re-run did not confirm; returns how many so far.
  int unconfirmed_failure(const std::string& id) { return ++records_[id].unconfirmed; }
  // Abandoned tickets in a row (a counted result resets them).
  void abandoned(const std::string& id, double now);
  void completed(const std::string& id) { records_[id].abandons = 0; }
  // Seconds until this identity may take tickets again (0: now).
  double cooldown_left(const std::string& id, double now);

 private:
  struct Record {
    int agreed = 0;         // native re-runs that agreed
    int pending = 0;        // re-runs submitted, not yet decided
    int unconfirmed = 0;    // failures a re-run did not confirm
    int abandons = 0;       // tickets abandoned in a row
    int since_trusted = 0;  // results drawn for verification since trusted (this process)
    double last_abandon = 0;
  };
  store::ResultStore& store_;
  const GatewayOptions& opt_;
  std::set<std::string> quarantined_;
  std::map<std::string, Record> records_;
};

}  // namespace dnnlab::server
