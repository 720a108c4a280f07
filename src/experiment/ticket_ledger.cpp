// The ticket ledger: the rules of a short unit's life (ticket_ledger.hpp).
#include "experiment/ticket_ledger.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace dnnlab::experiment {

TicketLedger::TicketLedger(TicketLedgerOptions options) : o_(options) {
  if (o_.remembered_per_holder < 1)
    throw std::invalid_argument(
        "remembered_per_holder: " + std::to_string(o_.remembered_per_holder) + " is below 1");
}

void TicketLedger::fill_line(std::vector<int64_t> items) {
  line_.assign(items.begin(), items.end());
}

TicketLedger::Holder& TicketLedger::holder(int h) {
  return holders_[h];
}

bool TicketLedger::free(int h) const {
  auto it = holders_.find(h);
  return it == holders_.end() || (!it->second.quarantined && it->second.owes == 0);
}

int TicketLedger::reported(int h) const {
  auto it = holders_.find(h);
  return it == holders_.end() ? 0 : it->second.reported;
}

int TicketLedger::charged(int h) const {
  auto it = holders_.find(h);
  return it == holders_.end() ? 0 : it->second.charged;
}

bool TicketLedger::quarantined(int h) const {
  auto it = holders_.find(h);
  return it != holders_.end() && it->second.quarantined;
}

std::optional<TicketLedger::Unit> TicketLedger::lease(int h, uint64_t version, int64_t size,
                                                      Time now, Time deadline) {
  if (line_.empty() || quarantined(h)) return std::nullopt;
  Unit u;
  u.id = next_id_++;
  u.holder = h;
  u.item = line_.front();
  line_.pop_front();
  u.size = size;
  u.version = version;
  u.leased = u.stage_began = now;
  u.deadline = deadline;
  holder(h).owes = u.id;
  return live_.emplace(u.id, u).first->second;
}

const TicketLedger::Unit* TicketLedger::find(uint64_t id) const {
  auto it = live_.find(id);
  return it == live_.end() ? nullptr : &it->second;
}

TicketLedger::Answer TicketLedger::answer(uint64_t id, int h) {
  if (auto it = live_.find(id); it != live_.end())
    return it->second.holder == h ? Answer::kLive : Answer::kForeign;
  auto hit = holders_.find(h);
  if (hit == holders_.end()) return Answer::kForeign;
  if (!remembered(id, h)) return Answer::kForeign;
  Holder& who = hit->second;
  if (who.owes == id) who.owes = 0;
  return Answer::kLate;
}

const TicketLedger::Unit* TicketLedger::remembered(uint64_t id, int h) const {
  auto hit = holders_.find(h);
  if (hit == holders_.end()) return nullptr;
  for (const Unit& u : hit->second.ended)
    if (u.id == id) return &u;
  return nullptr;
}

void TicketLedger::arrived(uint64_t id, Time now) {
  Unit& u = live_.at(id);
  u.arrivals.push_back(now);
  u.deadline = Time::max();
  Holder& who = holder(u.holder);
  if (who.owes == id) who.owes = 0;
}

void TicketLedger::report(uint64_t id, Time now, Time deadline) {
  Unit& u = live_.at(id);
  if (u.stage++ == 0) ++holder(u.holder).reported;
  u.stage_began = now;
  u.deadline = deadline;
}

TicketLedger::Ended TicketLedger::end(std::map<uint64_t, Unit>::iterator it, End how) {
  Ended e{std::move(it->second), how, false};
  live_.erase(it);
  Holder& who = holder(e.unit.holder);
  if (e.unit.stage > 0) {
    --who.reported;
  } else if (how != End::kFinished) {
    line_.push_front(e.unit.item);  // not reported: its work is still to do, first
    e.back_in_line = true;
  }
  who.ended.push_back(e.unit);
  if (static_cast<int>(who.ended.size()) > o_.remembered_per_holder) who.ended.pop_front();
  return e;
}

TicketLedger::Ended TicketLedger::finish(uint64_t id, Time now) {
  auto it = live_.find(id);
  if (it == live_.end()) throw std::logic_error("ticket ledger: finish of a unit not live");
  it->second.arrivals.resize(static_cast<size_t>(it->second.stage) + 1, now);
  return end(it, End::kFinished);
}

TicketLedger::Ended TicketLedger::expire(uint64_t id, Time) {
  auto it = live_.find(id);
  if (it == live_.end()) throw std::logic_error("ticket ledger: expiry of a unit not live");
  Holder& who = holder(it->second.holder);
  ++who.charged;
  who.owes = std::max(who.owes, id);  // its answer may still come: late
  return end(it, End::kExpired);
}

std::vector<TicketLedger::Ended> TicketLedger::release_holder(int h, bool quarantine) {
  if (quarantine) holder(h).quarantined = true;
  std::vector<Ended> out;
  for (auto it = live_.begin(); it != live_.end();) {
    auto next = std::next(it);
    if (it->second.holder == h) out.push_back(end(it, quarantine ? End::kLost : End::kGivenBack));
    it = next;
  }
  return out;
}

void TicketLedger::holder_back(int h) {
  Holder& who = holder(h);
  who.owes = 0;
  who.reported = 0;
}

TicketLedger::Time TicketLedger::earliest_deadline(int stage) const {
  Time t = Time::max();
  for (const auto& [id, u] : live_)
    if (u.stage == stage) t = std::min(t, u.deadline);
  return t;
}

std::vector<uint64_t> TicketLedger::overdue(int stage, Time now) const {
  std::vector<uint64_t> out;
  for (const auto& [id, u] : live_)
    if (u.stage == stage && u.deadline != Time::max() && u.deadline <= now) out.push_back(id);
  return out;
}

bool TicketLedger::any_at(int stage) const {
  for (const auto& [id, u] : live_)
    if (u.stage == stage) return true;
  return false;
}

std::size_t TicketLedger::remembered() const {
  std::size_t n = 0;
  for (const auto& [h, who] : holders_) n += who.ended.size();
  return n;
}

}  // namespace dnnlab::experiment
