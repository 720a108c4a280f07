// The endpoint's identity book: issue, check, forget (identities.hpp).
#include "hybrid_net/identities.hpp"

#include "tls/random.hpp"

namespace dnnlab::hybrid_net {

std::optional<Identity> IdentityBook::issue(const std::function<bool(int)>& connected) {
  if (next_id_ >= limits_.max_ids) return std::nullopt;
  if (records_.size() >= limits_.max_records) {
    // Forgetting a quarantined identity costs little (an unknown one is
    // refused too; only its reason is lost), but keep those longest.
    auto victim = records_.end();
    for (auto it = records_.begin(); it != records_.end(); ++it) {
      if (connected(it->first)) continue;
      if (victim == records_.end() ||
          std::pair(it->second.quarantined, it->second.used) <
              std::pair(victim->second.quarantined, victim->second.used))
        victim = it;
    }
    if (victim == records_.end()) return std::nullopt;
    records_.erase(victim);
  }
  Identity who{next_id_++, tls::random_hex(kSecretBytes)};
  records_[who.client] = Record{who.secret, false, "", ++clock_};
  return who;
}

std::string IdentityBook::check(const Identity& who) const {
  const auto it = records_.find(who.client);
  const std::string unknown = "hello: identity " + std::to_string(who.client) +
                              " is not known here or 'secret' is not its secret";
  if (it == records_.end()) return unknown;
  if (!constant_time_equal(who.secret, it->second.secret)) return unknown;
  if (it->second.quarantined)
    return "hello: identity " + std::to_string(who.client) +
           " is quarantined: " + it->second.reason;
  return "";
}

void IdentityBook::touch(int id) {
  auto it = records_.find(id);
  if (it != records_.end()) it->second.used = ++clock_;
}

void IdentityBook::quarantine(int id, const std::string& reason) {
  auto it = records_.find(id);
  if (it == records_.end()) return;
  it->second.quarantined = true;
  it->second.reason = reason;
}

}  // namespace dnnlab::hybrid_net
