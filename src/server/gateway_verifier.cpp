// Native re-runs of browser results (gateway_verifier.hpp).
#include "server/gateway_verifier.hpp"

#include <time.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "nn/model.hpp"
#include "server/gateway_assets.hpp"
#include "sweep/sampler.hpp"
#include "sweep/sweep_spec.hpp"
#include "worker/training_run.hpp"
#include "worker/worker_loop.hpp"

namespace dnnlab::server {

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

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

}  // namespace

Verifier::~Verifier() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    quit_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Verifier::submit(VerifyJob job) {
  std::lock_guard<std::mutex> lock(mu_);
  jobs_.push_back(std::move(job));
  if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
  cv_.notify_one();
}

std::vector<VerifyOutcome> Verifier::take_outcomes() {
  std::vector<VerifyOutcome> done;
  std::lock_guard<std::mutex> lock(mu_);
  done.swap(outcomes_);
  return done;
}

std::size_t Verifier::pending() const {
  std::lock_guard<std::mutex> lock(mu_);
  return jobs_.size() + busy_ + outcomes_.size();
}

void Verifier::loop() {
  std::unique_ptr<store::ResultStore> st;
  std::map<std::string, data::Dataset> data;
  std::map<std::int64_t, std::unique_ptr<sweep::SweepSpec>> sweeps;
  for (;;) {
    VerifyJob job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return quit_ || !jobs_.empty(); });
      if (quit_) return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
      ++busy_;
    }
    VerifyOutcome out{job, true, ""};
    bool skip = false;
    const double cpu0 = thread_cpu_seconds();
    try {
      if (!st) st = store::open_result_store(store_url_);
      auto trial = st->trial(job.trial_id);
      if (!trial || (!job.failed_after && trial->attempt != job.attempt)) {
        skip = true;  // it was reopened or redone since
      } else {
        auto& sw = sweeps[trial->experiment_id];
        if (!sw) {
          auto e = st->experiment(trial->experiment_id);
          sw = std::make_unique<sweep::SweepSpec>(sweep::parse_sweep(e->spec_text, e->spec_path));
        }
        nn::RunSpec run =
            sw->materialize({trial->index, json::parse(trial->config_json), trial->seed});
        const std::string key = data_key(run.data);
        if (!data.count(key)) {
          if (data.size() >= 2) data.clear();
          data.emplace(key, data::load(worker::load_options(run.data, data_dir_)));
        }
        out = job.failed_after ? confirm_failure(job, run, data.at(key))
                               : compare(job, *trial, run, data.at(key));
        out.cpu_seconds = thread_cpu_seconds() - cpu0;
        // With "client", a restarted gateway rebuilds its record of agreement.
        st->append_event("trial.verified", {{"trial", job.trial_id},
                                            {"attempt", job.attempt},
                                            {"worker", job.worker_id},
                                            {"client", job.client_key},
                                            {"failure", job.failed_after.has_value()},
                                            {"agree", out.agree},
                                            {"fresh", job.fresh},
                                            {"detail", out.detail},
                                            {"cpu_seconds", out.cpu_seconds}});
      }
    } catch (const std::exception& e) {
      skip = true;  // the verifier's own trouble is no evidence against the client
      std::cerr << "dnnlab serve: verifier: trial " << job.trial_id << ": " << e.what() << "\n";
    }
    std::lock_guard<std::mutex> lock(mu_);
    --busy_;
    if (!skip) outcomes_.push_back(std::move(out));
  }
}

VerifyOutcome Verifier::confirm_failure(const VerifyJob& job, const nn::RunSpec& run,
                                        const data::Dataset& ds) {
  struct Stop : nn::TrainObserver {
    int n;
    explicit Stop(int n) : n(n) {}
    bool on_epoch(const nn::EpochResult& r) override { return r.epoch < n; }
  } stop(*job.failed_after + 1);
  VerifyOutcome out{job, false, ""};
  try {
    worker::train_run(run, ds, &stop);
    out.detail = "the client reported a failure; the native run trained";
  } catch (const NumericError& e) {
    out.agree = true;
    out.detail = e.what();
  }
  return out;
}

VerifyOutcome Verifier::compare(const VerifyJob& job, const store::TrialRecord& trial,
                                const nn::RunSpec& run, const data::Dataset& ds) {
  VerifyOutcome out{job, true, ""};
  struct Stop : nn::TrainObserver {
    std::size_t n;
    explicit Stop(std::size_t n) : n(n) {}
    bool on_epoch(const nn::EpochResult& r) override {
      return static_cast<std::size_t>(r.epoch) < n;
    }
  } stop(trial.curve.size() + (trial.status == store::TrialStatus::failed ? 1 : 0));
  worker::RunResult res;
  bool failed = false;
  try {
    res = worker::train_run(run, ds, &stop);
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
  }
  // The final metrics are the curve's last epoch (the gateway stores nothing
  // else), compared above; only the test accuracy comes from the end of the run.
  check("final", "test_acc", ds.test.size() ? std::optional(res.test_acc) : std::nullopt,
        trial.metrics.test_acc, false, ds.test.size());
  if (out.agree)
    for (const auto& [name, sc] : bias) out.bias[name] = sc.first / sc.second;
  return out;
}

}  // namespace dnnlab::server
