// Native re-runs compared with reported results (native_check.hpp).
#include "experiment/native_check.hpp"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <optional>
#include <utility>

#include "experiment/training_run.hpp"
#include "nn/errors.hpp"

namespace dnnlab::experiment {

using nlohmann::json;

namespace {

// How close an honest client's numbers are to the native re-run's. The two
// do not train bit for bit alike (wasm's relaxed FMA, summation order), and
// the gap grows with training: in a CNN with batchnorm under Adam, or SGD at
// a high rate, losses were 1e-3 to 3e-3 apart within one or two epochs, and
// one or two of 1,000 validation samples flipped. So losses get 1% relative
// and accuracies 3 samples' worth (at least 0.1%): still far tighter than a
// client could hit without training the trial (a made-up curve is off by
// tens of percent; the tests lie by 0.25 on a loss of ~2).
constexpr double kLossRelTolerance = 1e-2;
constexpr double kAccSamples = 3;
constexpr double kAccTolerance = 1e-3;

// Relative closeness for losses.
bool close_rel(double a, double b, double tol) {
  if (!std::isfinite(a) || !std::isfinite(b)) return false;
  return std::fabs(a - b) <= tol * std::max({1.0, std::fabs(a), std::fabs(b)});
}

}  // namespace

NativeCheck confirm_failure_natively(int failed_after, const nn::RunSpec& run,
                                     const data::Dataset& ds) {
  struct Stop : nn::TrainObserver {
    int n;
    explicit Stop(int n) : n(n) {}
    bool on_epoch(const nn::EpochResult& r) override { return r.epoch < n; }
  } stop(failed_after + 1);
  NativeCheck out{false, "", {}};
  try {
    train_run(run, ds, &stop);
    out.detail = "the client reported a failure; the native run trained";
  } catch (const NumericError& e) {
    out.agree = true;
    out.detail = e.what();
  }
  return out;
}

NativeCheck compare_with_native(const store::TrialRecord& trial, const nn::RunSpec& run,
                                const data::Dataset& ds) {
  NativeCheck out;
  struct Stop : nn::TrainObserver {
    std::size_t n;
    explicit Stop(std::size_t n) : n(n) {}
    bool on_epoch(const nn::EpochResult& r) override {
      return static_cast<std::size_t>(r.epoch) < n;
    }
  } stop(trial.curve.size() + (trial.status == store::TrialStatus::failed ? 1 : 0));
  RunResult res;
  bool failed = false;
  try {
    res = train_run(run, ds, &stop);
  } catch (const NumericError&) {
    failed = true;
  }
  const std::vector<nn::EpochResult>& native = res.curve;
  if (trial.status == store::TrialStatus::failed) {
    out.agree = failed;
    if (!failed) out.detail = "the client reported a failure; the native run trained";
    return out;
  }
  if (failed) {
    out.agree = false;
    out.detail = "the native run diverged";
    return out;
  }
  if (native.size() != trial.curve.size()) {
    out.agree = false;
    out.detail = "the native run has " + std::to_string(native.size()) + " epochs, the client " +
                 std::to_string(trial.curve.size());
    return out;
  }
  std::map<std::string, std::pair<double, int>> bias;  // metric -> (sum of z, count)
  json deviation;  // the current epoch's (NativeCheck::deviations)
  // loss: relative; else an accuracy over `n` samples. `where` names the value.
  auto check = [&](const std::string& where, const char* name, std::optional<double> x,
                   std::optional<double> y, bool loss, std::int64_t n = 0) {
    if (!out.agree || (!x && !y)) return;  // no validation data: neither has a value
    const double acc_tol =
        std::max(kAccTolerance, kAccSamples / static_cast<double>(std::max<std::int64_t>(n, 1)));
    const bool ok =
        x && y && (loss ? close_rel(*x, *y, kLossRelTolerance) : std::fabs(*x - *y) <= acc_tol);
    if (!ok) {
      out.agree = false;
      out.detail = where + " " + name + ": native " + (x ? json(*x).dump() : "none") + ", client " +
                   (y ? json(*y).dump() : "none");
      return;
    }
    // In the client's favour: a higher accuracy, a lower loss.
    const double tol =
        loss ? kLossRelTolerance * std::max({1.0, std::fabs(*x), std::fabs(*y)}) : acc_tol;
    deviation[name] = loss ? std::fabs(*x - *y) / std::max({1.0, std::fabs(*x), std::fabs(*y)})
                           : std::fabs(*x - *y);
    auto& [sum, count] = bias[name];
    sum += (loss ? *x - *y : *y - *x) / tol;
    ++count;
  };
  for (std::size_t i = 0; i < native.size(); ++i) {
    const auto& a = native[i];
    const auto& b = trial.curve[i];
    const std::string where = "epoch " + std::to_string(i + 1);
    check(where, "train_loss", a.train_loss, b.train_loss, true);
    check(where, "val_loss", a.val_loss, b.val_loss, true);
    check(where, "train_acc", a.train_acc, b.train_acc, false, ds.train.size());
    check(where, "val_acc", a.val_acc, b.val_acc, false, ds.val.size());
    deviation["epoch"] = i + 1;
    out.deviations.push_back(std::exchange(deviation, json()));
  }
  // The final metrics are the curve's last epoch (the gateway stores nothing
  // else), compared above; only the test accuracy comes from the end of the run.
  check("final", "test_acc", ds.test.size() ? std::optional(res.test_acc) : std::nullopt,
        trial.metrics.test_acc, false, ds.test.size());
  if (deviation.contains("test_acc")) {
    deviation["final"] = "test_acc";
    out.deviations.push_back(std::move(deviation));
  }
  if (out.agree)
    for (const auto& [name, sc] : bias) out.bias[name] = sc.first / sc.second;
  return out;
}

}  // namespace dnnlab::experiment
