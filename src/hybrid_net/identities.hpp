// The hybrid endpoint's server-issued identities (docs/distributed.md
// "Identities"): each new client gets an id and a random secret in its
// welcome; a later hello with both resumes that id, and with it the record
// the step engine keeps under the id (re-checks passed, counters), unless
// the identity is quarantined. The book is bounded: at most
// `max_records` identities are remembered (the oldest one not connected is
// forgotten first, a quarantined one only when no other can go), and at most
// `max_ids` ids are issued in a run (each id costs the engine a few hundred
// bytes it keeps to the end). No sockets, no threads: the endpoint calls it
// under its lock.
//
//   IdentityBook book({.max_records = 256, .max_ids = 4096});
//   auto id = book.issue([&](int c) { return live(c); });   // nullopt: full
//   std::string why = book.check(hello.identity);            // "": resume it
//   book.quarantine(3, "re-check of ticket 9: ...");         // refused from now on
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include "hybrid_net/protocol.hpp"

namespace dnnlab::hybrid_net {

class IdentityBook {
 public:
  struct Limits {
    size_t max_records = 256;
    int max_ids = 4096;
  };
  explicit IdentityBook(Limits limits) : limits_(limits) {}

  // A new identity (the next id, a fresh secret). When the book is full it
  // forgets one not connected (`connected(id)` false), oldest use first,
  // quarantined ones last. nullopt when max_ids are issued, or every
  // remembered identity is connected.
  std::optional<Identity> issue(const std::function<bool(int)>& connected);
  // Why a hello presenting `who` may not resume it ("" when it may): an
  // unknown (or forgotten) id and a wrong secret get the same reason, so
  // that the reason tells a guesser nothing; a quarantined identity is told
  // why. The secret is compared in constant time.
  std::string check(const Identity& who) const;
  // `id` was admitted again: it is the youngest for eviction.
  void touch(int id);
  // From now on `id` is refused, with `reason`.
  void quarantine(int id, const std::string& reason);

  size_t size() const { return records_.size(); }
  bool remembers(int id) const { return records_.count(id) > 0; }
  int issued() const { return next_id_; }
  const Limits& limits() const { return limits_; }

 private:
  struct Record {
    std::string secret;
    bool quarantined = false;
    std::string reason;
    uint64_t used = 0;  // when issued or last resumed (book-local clock)
  };
  Limits limits_;
  std::map<int, Record> records_;
  int next_id_ = 0;
  uint64_t clock_ = 0;
};

}  // namespace dnnlab::hybrid_net
