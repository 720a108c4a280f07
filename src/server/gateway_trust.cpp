// Identities, quarantine and adaptive replication (gateway_trust.hpp).
#include "server/gateway_trust.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "server/token.hpp"

namespace dnnlab::server {

namespace {

constexpr std::size_t kIdHex = 24;   // 96 random bits
constexpr std::size_t kMacHex = 32;  // 128 bits of the HMAC

}  // namespace

std::string hmac_sha256_hex(std::string_view key, std::string_view message) {
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (!HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
            reinterpret_cast<const unsigned char*>(message.data()), message.size(), mac, &len))
    throw std::runtime_error("HMAC-SHA256 failed");
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < len; ++i) {
    out.push_back(hex[mac[i] >> 4]);
    out.push_back(hex[mac[i] & 15]);
  }
  return out;
}

TrustBook::TrustBook(store::ResultStore& store, const GatewayOptions& opt)
    : store_(store),
      opt_(opt),
      replication_(opt.trust_after, opt.verify_fraction),
      identity_abandons_(opt.max_abandons, opt.abandon_cooldown_seconds),
      address_abandons_(opt.max_abandons_per_address, opt.abandon_cooldown_seconds) {
  // Quarantines outlive the process: they are rebuilt from the store.
  for (const auto& e : store.events_of_type("worker.quarantined"))
    if (e.data.contains("client") && e.data["client"].is_string())
      quarantined_.insert(e.data["client"].get<std::string>());
  // So does a record of agreement (identities signed with the same secret).
  for (const auto& e : store.events_of_type("trial.verified"))
    if (e.data.value("agree", false) && e.data.value("fresh", true) && e.data.contains("client") &&
        e.data["client"].is_string())
      ++records_[e.data["client"].get<std::string>()].replication.agreed;
}

TrustBook::Identity TrustBook::issue() const {
  Identity i;
  i.id = random_hex(kIdHex / 2);
  i.credential = i.id + "." + hmac_sha256_hex(opt_.secret, "client:" + i.id).substr(0, kMacHex);
  return i;
}

std::optional<std::string> TrustBook::identity_of(std::string_view credential) const {
  const std::size_t dot = credential.find('.');
  if (dot != kIdHex || credential.size() != kIdHex + 1 + kMacHex) return std::nullopt;
  const std::string id(credential.substr(0, dot));
  for (char c : id)
    if (!std::isxdigit(static_cast<unsigned char>(c)) ||
        std::isupper(static_cast<unsigned char>(c)))
      return std::nullopt;
  const std::string mac = hmac_sha256_hex(opt_.secret, "client:" + id).substr(0, kMacHex);
  const std::string_view given = credential.substr(dot + 1);
  if (given.size() != mac.size() || CRYPTO_memcmp(mac.data(), given.data(), mac.size()) != 0)
    return std::nullopt;
  return id;
}

bool TrustBook::quarantine(const std::string& id, const std::string& worker_id,
                           std::int64_t trial_id, const std::string& reason) {
  if (!quarantined_.insert(id).second) return false;
  // The event is the record: a restarted gateway refuses the identity too.
  store_.append_event(
      "worker.quarantined",
      {{"worker", worker_id}, {"client", id}, {"trial", trial_id}, {"reason", reason}});
  return true;
}

bool TrustBook::trusted(const std::string& id) const {
  auto it = records_.find(id);
  return replication_.trusted(it == records_.end() ? experiment::ReplicationRecord{}
                                                   : it->second.replication);
}

int TrustBook::pending_cap(const std::string& id, int cap) const {
  if (trusted(id)) return cap;
  auto it = records_.find(id);
  const int lacking = replication_.lacking(it == records_.end() ? experiment::ReplicationRecord{}
                                                                : it->second.replication);
  return std::min(cap, std::max(1, lacking));
}

bool TrustBook::choose_for_verification(const std::string& id, std::int64_t trial_id, int attempt) {
  // Unpredictable to the client (it never sees the secret), reproducible here.
  const std::string h = hmac_sha256_hex(
      opt_.secret, "verify:" + std::to_string(trial_id) + ":" + std::to_string(attempt));
  const double u = static_cast<double>(std::stoull(h.substr(0, 13), nullptr, 16)) * 0x1.0p-52;
  return replication_.choose(records_[id].replication, u);
}

void TrustBook::abandoned(const std::string& id, const std::string& address, double now) {
  identity_abandons_.abandoned(records_[id].abandons, now);
  address_abandons_.abandoned(addresses_[address].abandons, now);
}

double TrustBook::cooldown_left(const std::string& id, const std::string& address, double now) {
  double left = 0;
  if (auto it = records_.find(id); it != records_.end())
    left = identity_abandons_.cooldown_left(it->second.abandons, now);
  if (auto it = addresses_.find(address); it != addresses_.end())
    left = std::max(left, address_abandons_.cooldown_left(it->second.abandons, now));
  return left;
}

bool TrustBook::biased(const std::string& id, const std::map<std::string, double>& z) {
  bool over = false;
  Record& r = records_[id];
  for (const auto& [metric, value] : z) {
    // One-sided CUSUM (Page 1954): S = max(0, S + z - k); an honest client's
    // deviations have no sign to them, so S keeps returning to 0.
    double& s = r.bias[metric];
    s = std::max(0.0, s + value - kBiasAllowance);
    over |= s >= kBiasThreshold;
  }
  return over;
}

void TrustBook::forget_idle(double now) {
  for (auto it = addresses_.begin(); it != addresses_.end();) {
    const AddressRecord& a = it->second;
    const bool charged =
        a.pending > 0 || a.unconfirmed > 0 || address_abandons_.charged(a.abandons, now);
    it = charged ? std::next(it) : addresses_.erase(it);
  }
}

}  // namespace dnnlab::server
