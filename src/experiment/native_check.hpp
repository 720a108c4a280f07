// Native re-runs of results reported from elsewhere (a browser's trial, a
// stored result `dnnlab rerun` checks): train the trial's spec here for as
// many epochs as were reported and compare the numbers. The gateway's
// verifier (server/gateway_verifier.cpp) runs these on its own thread.
//
//   experiment::NativeCheck c = experiment::compare_with_native(trial, run, data);
//   if (!c.agree) quarantine(c.detail);
#pragma once
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "data/dataset.hpp"
#include "nn/spec.hpp"
#include "store/result_store.hpp"

namespace dnnlab::experiment {

struct NativeCheck {
  bool agree = true;
  std::string detail;  // what disagreed, or the native failure's message
  // Per metric, the mean deviation of the reported values from the native
  // ones in the reporter's favour (higher accuracy, lower loss), in units
  // of the tolerance: a bias test's input. Only when they agree.
  std::map<std::string, double> bias;
  // How far the reported numbers were from the native ones, metric by
  // metric: [{"epoch": 1, "train_loss": relative, "val_loss": relative,
  // "train_acc": absolute, "val_acc": absolute}, ..., {"final":
  // "test_acc", "test_acc": absolute}] in the tolerance's own measure
  // (losses |a - b| / max(1, |a|, |b|), accuracies |a - b|), up to the first
  // disagreement: the measured spread behind the policy (docs/security.md).
  nlohmann::json deviations = nlohmann::json::array();
};

// Re-runs the trial for as many epochs as its stored curve holds and
// compares epoch by epoch (1% relative on losses; accuracies within 3
// samples, at least 0.1%), then the final test accuracy: every number that
// is stored and ranked (the other final metrics are the last epoch's). A
// trial stored as failed agrees when the native run fails too.
NativeCheck compare_with_native(const store::TrialRecord& trial, const nn::RunSpec& run,
                                const data::Dataset& data);

// A failure reported after `failed_after` epochs: agrees when the native run
// fails too (within one more epoch).
NativeCheck confirm_failure_natively(int failed_after, const nn::RunSpec& run,
                                     const data::Dataset& data);

}  // namespace dnnlab::experiment
