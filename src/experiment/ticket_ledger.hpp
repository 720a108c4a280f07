// The ticket ledger: the life of short units of work that die with the
// process that hands them out (the hybrid trainer's gradient tickets), in
// the lease service's vocabulary. A trial lives in a durable queue and the
// store (lease_service.hpp); a gradient ticket lives for a second against an
// in-memory model, so a durable queue per ticket would buy nothing: its
// lease, reports, deadline, give-back and the answers that come too late
// are kept here, in memory, by the same module, with the same rules.
//
//   experiment::TicketLedger ledger;
//   ledger.fill_line({0, 32, 64});                   // the work to hand out, in order
//   auto u = ledger.lease(holder, version, 32, now, now + 60s);   // the first in line
//   ... the holder's first report arrives:
//   ledger.arrived(u->id, now);                      // its deadline stops while it is judged
//   ledger.report(u->id, now, now + 60s);            // accepted: the next stage, a new deadline
//   ... the last report arrives:
//   ledger.finish(u->id, now);                       // done with; remembered for a while
//   for (auto id : ledger.overdue(1, now)) ledger.expire(id, now);   // silence costs the holder
//
// A unit's life:
//   lease      the first item in line, to a holder, with a deadline; the
//              holder owes an answer and gets no other unit before it
//              gives one (it works through its frames in order).
//   arrived    a report came in: the deadline stops while the adapter
//              judges it (a report it refuses ends with its holder).
//   report     the report is accepted: the next stage, with a new deadline.
//   finish     the last report is in: the unit leaves the ledger.
//   expire     its deadline passed: the holder is charged and still owes
//              its answer. A unit not reported yet goes back first in
//              line; a reported one is lost (what it reported counted).
//   give_back  its holder left (not its fault): not charged; back first in
//              line, or lost once reported, as with expire.
//   lose       its holder is quarantined: as give_back, and the holder
//              gets nothing more.
// An answer on a unit that ended, from the holder it was leased to, is late
// (discard it); from anyone else, or on a unit never leased to it, foreign
// (its sender lies: quarantine it).
//
// Memory: the live units, the line, and per holder the last
// `remembered_per_holder` ended units (a holder owes at most the units it
// holds at once, a few: an answer on an older one is foreign).
// Not thread-safe: the adapter's one thread owns it.
#pragma once
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <vector>

namespace dnnlab::experiment {

struct TicketLedgerOptions {
  // Ended units remembered per holder, to tell a late answer from a
  // foreign one; at least 1.
  int remembered_per_holder = 64;
};

class TicketLedger {
 public:
  using Clock = std::chrono::steady_clock;
  using Time = Clock::time_point;

  struct Unit {
    uint64_t id = 0;  // from 1, in lease order
    int holder = -1;
    int64_t item = 0;      // what it covers: the item of work from the line (a batch's first row)
    int64_t size = 0;      // and how much of it (rows)
    uint64_t version = 0;  // the state it was leased against (a model version)
    int stage = 0;         // reports accepted so far
    Time leased;           // when it was leased
    Time stage_began;      // when the current stage began (leased, or the last report)
    Time deadline;         // of the current stage; Time::max() while a report is judged
    std::vector<Time> arrivals;  // when each report arrived, in order (the last may be judged)
  };

  enum class End {
    kFinished,   // its last report is in
    kExpired,    // its deadline passed: the holder charged
    kGivenBack,  // its holder left
    kLost,       // its holder was quarantined
  };
  struct Ended {
    Unit unit;
    End end = End::kFinished;
    bool back_in_line = false;  // its item went back first in line
  };

  enum class Answer {
    kLive,     // a live unit of this holder's
    kLate,     // a unit of this holder's that ended: discard the answer
    kForeign,  // not this holder's (or ended too long ago to remember): quarantine
  };

  explicit TicketLedger(TicketLedgerOptions options = {});

  // The line of work: replaced (an epoch's batches, in order).
  void fill_line(std::vector<int64_t> items);
  bool work_left() const { return !line_.empty(); }
  // The item the next lease takes.
  std::optional<int64_t> next_in_line() const {
    return line_.empty() ? std::nullopt : std::optional<int64_t>(line_.front());
  }
  std::size_t line_size() const { return line_.size(); }

  // Whether `holder` may take a unit: it is not quarantined and owes no
  // answer (a live unit not reported yet, or one that expired unanswered).
  bool free(int holder) const;
  // Units of `holder` live past their first stage (reported, waiting for
  // the next report).
  int reported(int holder) const;
  int charged(int holder) const;
  bool quarantined(int holder) const;

  // Leases the first item in line to `holder`: nullopt when the line is
  // empty or the holder is quarantined. `size` is what the unit covers of
  // the item (the caller's choice: a short last batch).
  std::optional<Unit> lease(int holder, uint64_t version, int64_t size, Time now, Time deadline);

  // The live unit `id`, or nullptr.
  const Unit* find(uint64_t id) const;
  const std::map<uint64_t, Unit>& live() const { return live_; }

  // Who may answer on `id`: see Answer. kLate also settles what the holder
  // owed on it.
  Answer answer(uint64_t id, int holder);
  // The ended unit `id` of `holder`'s, while it is remembered; nullptr.
  const Unit* remembered(uint64_t id, int holder) const;

  // A report on live unit `id` arrived at `now`: its deadline stops, and
  // its holder owes nothing more on it.
  void arrived(uint64_t id, Time now);
  // The report is accepted: the unit's next stage begins at `now`.
  void report(uint64_t id, Time now, Time deadline);
  // Its last report is in.
  Ended finish(uint64_t id, Time now);
  // Its deadline passed (see the life above).
  Ended expire(uint64_t id, Time now);
  // Every live unit of a holder that left (or, with `quarantine`, was made
  // to: kLost, and it gets nothing more), in id order.
  std::vector<Ended> release_holder(int holder, bool quarantine);
  // A holder that left is back on a new link: it owes nothing (its old
  // link's answers are gone). A quarantined one stays so.
  void holder_back(int holder);

  // The earliest running deadline of live units at `stage`, Time::max()
  // when none; the units at `stage` whose deadline has passed, in id order.
  Time earliest_deadline(int stage) const;
  std::vector<uint64_t> overdue(int stage, Time now) const;
  bool any_at(int stage) const;

  // Ended units remembered now, over all holders (the bound's test).
  std::size_t remembered() const;

 private:
  struct Holder {
    uint64_t owes = 0;  // the last unit it owes an answer on (0: none)
    int reported = 0;
    int charged = 0;
    bool quarantined = false;
    std::deque<Unit> ended;  // the last ones, oldest first
  };
  Holder& holder(int h);
  Ended end(std::map<uint64_t, Unit>::iterator it, End how);

  TicketLedgerOptions o_;
  uint64_t next_id_ = 1;
  std::deque<int64_t> line_;
  std::map<uint64_t, Unit> live_;
  std::map<int, Holder> holders_;
};

}  // namespace dnnlab::experiment
