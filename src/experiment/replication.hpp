// Adaptive replication (DESIGN.md, "Trust"; BOINC's rule): how likely a
// client's next piece of work is to be re-run natively, from the record of
// its re-runs that agreed. One rule for every unit of work: the browser
// gateway's trials (server::TrustBook: `trust_after` is --trust-after, the
// floor --verify-fraction, the draw an HMAC of the server's secret) and the
// hybrid trainer's gradient tickets (hybrid::HybridServer: `recheck_first`
// and `recheck_rate`, the draw the server's keyed stream). The adapter
// supplies the draw, after the work arrived and where the client cannot see
// it; the rule owns everything else. Standard library only
// (dnnlab_lease_core).
//
//   const experiment::Replication rule(/*trust_after=*/3, /*floor=*/0.05);
//   experiment::ReplicationRecord record;       // one per identity, kept by the adapter
//   if (rule.choose(record, u)) {               // u uniform in [0, 1)
//     ... re-run it natively; if it agreed: ++record.agreed, else quarantine ...
//   }
//
// The rule: every result of an untrusted record (agreed < trust_after) is
// re-run; then its k-th result since it became trusted (k = 0, 1, ...) with
// probability max(floor, 2^-(k+1)): 1/2, 1/4, 1/8, ... down to the floor.
// With trust_after 0 there is no record to fade from: the floor from the
// first result. The halving replaced trust_after / (agreed + 1), which fell
// only as re-runs agreed while re-runs came rarer as it fell
// (bench/RESULTS.md, "Verification overhead").
#pragma once

namespace dnnlab::experiment {

// What the rule needs to know of one identity; the adapter keeps it (the
// gateway per identity, rebuilt from the store's verified events; the hybrid
// trainer per client id, for the run's life, across reconnects).
struct ReplicationRecord {
  int agreed = 0;  // re-runs that agreed (and count towards trust)
  int drawn = 0;   // results decided since it became trusted (saturates)
};

class Replication {
 public:
  // Throws std::invalid_argument naming the parameter when `trust_after` is
  // negative or `floor` is outside [0, 1] (NaN included); adapters check
  // their own options first, under their own names.
  Replication(int trust_after, double floor);

  int trust_after() const { return trust_after_; }
  double floor() const { return floor_; }

  bool trusted(const ReplicationRecord& r) const { return r.agreed >= trust_after_; }
  // Agreements the record still lacks to be trusted (0 once it is).
  int lacking(const ReplicationRecord& r) const;
  // The probability that the record's next result is re-run.
  double probability(const ReplicationRecord& r) const;
  // Decides the record's next result with the draw `u` in [0, 1): re-run
  // when u < probability(r). Call once per result: a trusted record counts
  // the result (r.drawn), so its next one is drawn with half the chance.
  bool choose(ReplicationRecord& r, double u) const;

 private:
  int trust_after_;
  double floor_;
};

}  // namespace dnnlab::experiment
