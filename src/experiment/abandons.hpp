// Abandoned work costs the one who abandoned it (DESIGN.md, "Trust": a
// stranger's silence costs the stranger, not the trial): work given up in a
// row, past a bound, buys a cooldown without new work; finished work
// clears the count. One rule for every unit of work: the browser gateway's
// trial tickets (server::TrustBook, per identity and per address) and the
// hybrid trainer's gradient tickets (hybrid::HybridServer, per client).
// Standard library only (dnnlab_lease_core).
//
//   const experiment::AbandonRule rule(/*max_in_a_row=*/3, /*cooldown_seconds=*/600);
//   experiment::AbandonRecord record;           // one per identity, kept by the adapter
//   rule.abandoned(record, now);                // its ticket expired or was given up
//   if (rule.cooldown_left(record, now) > 0) ... no ticket for it yet ...
//   rule.completed(record);                     // a result counted
#pragma once

namespace dnnlab::experiment {

struct AbandonRecord {
  int in_a_row = 0;  // work abandoned since its last finished one
  double last = 0;   // when the last was abandoned (the adapter's clock, seconds)
};

class AbandonRule {
 public:
  // Throws std::invalid_argument naming the parameter when `max_in_a_row`
  // is below 1 or `cooldown_seconds` negative (or NaN).
  AbandonRule(int max_in_a_row, double cooldown_seconds);

  int max_in_a_row() const { return max_; }
  double cooldown_seconds() const { return cooldown_; }

  void abandoned(AbandonRecord& r, double now) const {
    ++r.in_a_row;
    r.last = now;
  }
  static void completed(AbandonRecord& r) { r.in_a_row = 0; }
  // Seconds until the record may take work again (0: now): after
  // `max_in_a_row` abandoned in a row, `cooldown_seconds` from the last.
  // A record that has served its time starts afresh (its count cleared).
  double cooldown_left(AbandonRecord& r, double now) const;
  // Whether the record still holds a charge worth keeping (an adapter
  // forgets the others): abandons whose cooldown could still run.
  bool charged(const AbandonRecord& r, double now) const {
    return r.in_a_row > 0 && now - r.last < cooldown_;
  }

 private:
  int max_;
  double cooldown_;
};

}  // namespace dnnlab::experiment
