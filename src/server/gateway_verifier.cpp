// Native re-runs of browser results (gateway_verifier.hpp).
#include "server/gateway_verifier.hpp"

#include <time.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "experiment/catalogue.hpp"
#include "experiment/native_check.hpp"
#include "experiment/training_run.hpp"
#include "experiment/weights_retention.hpp"

namespace dnnlab::server {

using nlohmann::json;

namespace {

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// The client's parameters (float32, in Model::params() order, as
// dnnlab_model_get_params writes them) as the trial's safetensors file with
// the metadata a native worker's has; empty when the retention rule would
// not keep them. Running statistics (batch norm) are not on the wire: a
// browser's file holds their initial values.
std::string browser_weights(store::ResultStore& st, experiment::Catalogue& catalogue,
                            const store::TrialRecord& trial, const nn::RunSpec& run,
                            const data::Dataset& ds, const std::string& floats) {
  experiment::ExperimentEntry& e = catalogue.get(trial.experiment_id);
  if (!experiment::WeightsRetention(st, experiment::WeightsRule::of(*e.sweep))
           .could_keep(trial.id, trial.experiment_id, trial.metrics))
    return {};
  nn::Model model = nn::Model::build(run.model, nn::model_input(run.model, ds.sample_shape),
                                     ds.num_classes, run.train.seed);
  if (floats.size() != static_cast<std::size_t>(model.num_params()) * sizeof(float)) return {};
  const char* p = floats.data();
  for (nn::Param* param : model.params()) {
    const std::size_t n = sizeof(float) * static_cast<std::size_t>(param->value.numel());
    std::memcpy(param->value.data(), p, n);
    p += n;
  }
  return experiment::weights_file(run, model,
                                  {{"trial_id", std::to_string(trial.id)},
                                   {"params", trial.config_json},
                                   {"trained_by", "browser"}});
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
  // The thread's own store connection, catalogue and data sets.
  std::unique_ptr<store::ResultStore> st;
  std::unique_ptr<experiment::Catalogue> catalogue;
  experiment::DataCache data(data_dir_);
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
    VerifyOutcome out{job, true, "", 0, {}};
    out.job.weights.clear();  // not carried back: the file is (weights_file)
    bool skip = false;
    const double cpu0 = thread_cpu_seconds();
    try {
      if (!st) {
        st = store::open_result_store(store_url_);
        catalogue = std::make_unique<experiment::Catalogue>(*st);
      }
      auto trial = st->trial(job.trial_id);
      if (!trial || (!job.failed_after && trial->attempt != job.attempt)) {
        skip = true;  // it was reopened or redone since
      } else {
        const nn::RunSpec run = catalogue->run_spec(*trial);
        const data::Dataset& ds = data.get(run.data).data;
        const experiment::NativeCheck c =
            job.failed_after ? experiment::confirm_failure_natively(*job.failed_after, run, ds)
                             : experiment::compare_with_native(*trial, run, ds);
        out.agree = c.agree;
        out.detail = c.detail;
        out.bias = c.bias;
        out.experiment_id = trial->experiment_id;
        if (c.agree && !job.failed_after && !job.weights.empty())
          out.weights_file = browser_weights(*st, *catalogue, *trial, run, ds, job.weights);
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
                                            {"deviations", c.deviations},
                                            // The client's word (display, and the measured
                                            // spread per backend; never a tolerance).
                                            {"backend", trial->provenance.value("backend", "")},
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

}  // namespace dnnlab::server
