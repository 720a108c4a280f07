// Trust in browser clients (DESIGN.md, "Trust"):
// - identities are issued by the server: a random id and an HMAC of it under
//   the server's secret, so a client can neither choose one nor use another's
//   (the id is public in /api/workers, the MAC never is);
// - quarantine sticks to identities and is rebuilt from the store's
//   worker.quarantined events, so it outlives the process;
// - adaptive replication as in BOINC, the rule of experiment::Replication
//   (the hybrid trainer's gradient tickets follow the same one): an
//   identity's results are all re-run natively until `trust_after` agreed,
//   then a fraction halving with each result down to `verify_fraction`,
//   drawn with the secret after the result arrived; only agreements on fresh
//   work (a trial's first attempt of an experiment whose sweep was not run
//   before) earn it, since a curve that is already public can be replayed
//   without training;
// - a bias test over the agreements: a client whose numbers are, result
//   after result, better than the native re-run's by less than the tolerance
//   is caught by a one-sided CUSUM per metric (docs/security.md);
// - the record of what a client cost: re-runs pending, failures a re-run did
//   not confirm, tickets abandoned in a row; the same charges per remote
//   address, across the identities it made.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>

#include "experiment/abandons.hpp"
#include "experiment/replication.hpp"
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
  // Whether this result is re-run natively (experiment::Replication with
  // trust_after and verify_fraction as its floor): all of an untrusted
  // identity's; then, for its k-th result since it became trusted (k = 0,
  // 1, ...), with probability max(verify_fraction, 2^-(k+1)); with
  // trust_after 0, just verify_fraction. Call once per result.
  bool choose_for_verification(const std::string& id, std::int64_t trial_id, int attempt);
  // A native re-run agreed. `fresh`: the work could not have been copied
  // (see above): only then does it count towards trust.
  void agreed(const std::string& id, bool fresh) {
    if (fresh) ++records_[id].replication.agreed;
  }
  // The bias test: `z` holds, per metric, the mean deviation of the client's
  // values from the native ones in the client's favour, in units of the
  // verifier's tolerance (in [-1, 1] for an agreeing result). True when the
  // identity's CUSUM of some metric reached kBiasThreshold: it is to be
  // quarantined.
  static constexpr double kBiasAllowance = 0.3;  // k: the drift an honest client may show
  static constexpr double kBiasThreshold = 2.0;  // h
  bool biased(const std::string& id, const std::map<std::string, double>& z);
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
  // Abandoned tickets in a row (a counted result resets them), charged to
  // the identity and to its address (experiment::AbandonRule: max_abandons,
  // max_abandons_per_address, abandon_cooldown_seconds).
  void abandoned(const std::string& id, const std::string& address, double now);
  void completed(const std::string& id, const std::string& address) {
    experiment::AbandonRule::completed(records_[id].abandons);
    experiment::AbandonRule::completed(addresses_[address].abandons);
  }
  // Seconds until this identity, or any identity from this address, may take
  // tickets again (0: now).
  double cooldown_left(const std::string& id, const std::string& address, double now);

  // ---- per address, across identities ----
  int& address_pending(const std::string& address) { return addresses_[address].pending; }
  // Failures of the address's identities that a re-run did not confirm:
  // adds `more`, returns how many so far.
  int address_unconfirmed(const std::string& address, int more) {
    return addresses_[address].unconfirmed += more;
  }
  // Drops the records that hold nothing (called now and then): a record is
  // kept only while it has something pending or a charge on it.
  void forget_idle(double now);
  std::size_t records() const { return records_.size() + addresses_.size(); }

 private:
  struct Record {
    // Re-runs that agreed (rebuilt from the store) and results drawn since
    // trusted (this process).
    experiment::ReplicationRecord replication;
    int pending = 0;                     // re-runs submitted, not yet decided
    int unconfirmed = 0;                 // failures a re-run did not confirm
    experiment::AbandonRecord abandons;  // tickets abandoned in a row
    std::map<std::string, double> bias;  // metric -> CUSUM of favourable deviations
  };
  struct AddressRecord {
    int pending = 0;                     // re-runs of its identities' results not yet decided
    int unconfirmed = 0;                 // failures of its identities a re-run did not confirm
    experiment::AbandonRecord abandons;  // tickets abandoned in a row by its identities
  };
  store::ResultStore& store_;
  const GatewayOptions& opt_;
  const experiment::Replication replication_;
  const experiment::AbandonRule identity_abandons_, address_abandons_;
  std::set<std::string> quarantined_;
  std::map<std::string, Record> records_;
  std::map<std::string, AddressRecord> addresses_;
};

}  // namespace dnnlab::server
