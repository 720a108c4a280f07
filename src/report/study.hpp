// The numbers of a depth study, computed from its trials: least-squares fits
// of time against depth, the best accuracy per depth, the depth at which a
// family falls to chance, whether accuracy plateaus, the gap other families
// close against plain nets. Pure functions on plain values (no store, no
// files), so that every rule is tested on hand-made data
// (tests/report/study_test.cpp); gather.hpp fills a Study from the store and
// render.hpp writes it out.
//
//   report::Study s = report::gather(store, experiment_id, options);
//   report::Analysis a = report::analyse(s);
//   std::string html = report::render_html(s, a);
//
// The rules, as the report states them:
//   * at chance: a depth's best accuracy is at most chance + 0.1 * (1 - chance)
//     (it got less than a tenth of the way from guessing to perfect);
//     chance = 1 / classes. The chance depth is the shallowest depth from
//     which every measured depth is at chance.
//   * plateau: with peak = the best accuracy over all depths and tol = 0.01,
//     the plateau starts at the shallowest depth within tol of the peak, if
//     every deeper depth measured stays within tol of it; when a deeper one
//     falls below, accuracy peaks and declines; when the shallowest depth
//     within tol is the deepest measured, it is still rising.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dnnlab::report {

struct LinearFit {
  double slope = 0, intercept = 0;
  double r2 = 0;  // 1 - SS_res / SS_tot; 1 when every y is equal and fitted exactly
  std::size_t n = 0;
};
// Ordinary least squares y = intercept + slope * x; nullopt with fewer than
// two points or when every x is equal.
std::optional<LinearFit> least_squares(const std::vector<double>& x, const std::vector<double>& y);

struct DepthValue {
  double depth = 0;
  double value = 0;
  bool operator==(const DepthValue&) const = default;
};
// The largest value at each depth, by depth ascending.
std::vector<DepthValue> best_per_depth(const std::vector<DepthValue>& points);

struct Rules {
  double chance_fraction = 0.1;  // "at chance": below chance + this * (1 - chance)
  double plateau_tolerance = 0.01;
};

bool at_chance(double accuracy, double chance, const Rules& rules = {});
// The shallowest depth from which every depth of `best` (by depth) is at
// chance; nullopt when the deepest is not.
std::optional<double> chance_depth(const std::vector<DepthValue>& best, double chance,
                                   const Rules& rules = {});

struct Plateau {
  enum class Kind { too_few, rising, plateau, declines };
  Kind kind = Kind::too_few;  // too_few: under 3 depths measured
  double peak = 0;            // best accuracy over all depths
  double peak_depth = 0;      // the shallowest depth within tolerance of the peak
  double falls_at = 0;        // declines: the first deeper depth below peak - tolerance
};
Plateau find_plateau(const std::vector<DepthValue>& best, const Rules& rules = {});
std::string describe(const Plateau& p, const std::string& depth_name);

// One trial as the report sees it. Strings come from the store (user specs):
// the renderers escape them.
struct TrialRow {
  std::int64_t id = 0, index = 0;
  std::string status;  // finished, pruned, failed, running, queued, cancelled
  bool provisional = false;
  std::string family, activation;                       // "" when the sweep has no such parameter
  double depth = 0;                                     // the depth parameter (or its stand-in)
  std::optional<double> accuracy;                       // val_acc at the last epoch it reported
  std::int64_t epochs = 0;                              // epochs it reported
  std::optional<double> epoch_seconds, sample_seconds;  // mean training time per epoch, per sample
  std::string params;                                   // "depth=4, activation=relu"
  std::string error;
};

struct Study {
  std::int64_t experiment_id = 0;
  std::string name, status;
  std::string metric = "val_acc";  // what `accuracy` holds
  // The parameters the axes come from ("" when absent), and how they were chosen.
  std::string depth_param, family_param, activation_param;
  std::vector<std::string> notes;       // e.g. "no `depth` parameter: `width` is used instead"
  int classes = 0;                      // 0: unknown (no chance line)
  std::optional<std::int64_t> samples;  // training samples per epoch, when known
  std::vector<std::string> families, activations;  // in the sweep's order
  std::vector<TrialRow> trials;                    // by index
  double chance() const { return classes > 0 ? 1.0 / classes : 0.0; }
};

// Does `row` count for bests and conclusions (ended with an accuracy, not provisional)?
bool counts(const TrialRow& row);

struct SeriesResult {
  std::string family, activation;  // activation "" : the family over every activation
  std::vector<DepthValue> best;
  std::optional<double> chance_depth;
  Plateau plateau;
};
struct FamilyResult {
  SeriesResult overall;  // best over every activation
  std::optional<LinearFit> epoch_fit, sample_fit;
  std::vector<DepthValue> gap;  // best minus plain's best, at depths both measured; empty for plain
};
struct BestAtDepth {
  double depth = 0;
  std::size_t trial = 0;  // index into Study::trials
};
struct Analysis {
  Rules rules;
  std::vector<SeriesResult> series;                // per (family, activation), in the sweep's order
  std::vector<FamilyResult> families;              // per family
  std::optional<LinearFit> epoch_fit, sample_fit;  // every family together
  std::vector<BestAtDepth> best;                   // the best trial at each depth
  std::string plain_family;                        // the family gaps are measured against
  std::vector<std::string> conclusions;            // sentences, plain text
};
Analysis analyse(const Study& study, const Rules& rules = {});

// Numbers as the report prints them: "%.4g" of seconds, "%.4f" of accuracies.
std::string fmt_num(double v, const char* format = "%.4g");

}  // namespace dnnlab::report
