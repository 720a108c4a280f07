// The gateway's native verifier: re-runs a browser's trial on its own thread
// (its own store connection, catalogue and data cache) and compares the
// client's curve epoch by epoch (experiment/native_check.hpp). The io
// thread submits jobs and collects outcomes.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "store/result_store.hpp"

namespace dnnlab::server {

struct VerifyJob {
  std::int64_t trial_id = 0;
  int attempt = 0;
  std::string worker_id, client_key;  // client_key: the identity
  // A reported failure after this many epochs: agreed when the native run
  // fails too (within one more epoch). The trial has been given back, so
  // its attempt may have moved on.
  std::optional<int> failed_after;
  // The result could not have been copied from public curves (gateway_trust.hpp):
  // an agreement on it earns trust.
  bool fresh = true;
  std::string address;  // the client's remote address, charged for the re-run
  // A finished trial's parameters as the client sent them (float32, in
  // the model's parameter order): kept as its weights once the re-run agrees.
  std::string weights;
};

struct VerifyOutcome {
  VerifyJob job;
  bool agree = true;
  std::string detail;
  // CPU the verifier thread spent on this re-run (loading data included):
  // the cost of verification, in the trial.verified event as cpu_seconds.
  double cpu_seconds = 0;
  // Per metric, the mean deviation of the client's values from the native
  // ones in the client's favour (higher accuracy, lower loss), in units of
  // the tolerance: the bias test's input (TrustBook::biased).
  std::map<std::string, double> bias;
  // On agreement, the client's parameters as a safetensors file, when the
  // experiment's retention rule could keep them (empty otherwise); the
  // gateway offers them once the trial counts.
  std::int64_t experiment_id = 0;
  std::string weights_file;
};

class Verifier {
 public:
  Verifier(std::string store_url, std::string data_dir)
      : store_url_(std::move(store_url)), data_dir_(std::move(data_dir)) {}
  ~Verifier();  // a running re-run finishes first
  Verifier(const Verifier&) = delete;
  Verifier& operator=(const Verifier&) = delete;

  void submit(VerifyJob job);
  // Decided re-runs since the last call. A re-run the verifier could not do
  // (its own trouble, or the trial moved on) is no evidence either way and
  // is not reported.
  std::vector<VerifyOutcome> take_outcomes();
  std::size_t pending() const;  // queued, running or not yet taken

 private:
  void loop();

  std::string store_url_, data_dir_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<VerifyJob> jobs_;
  std::vector<VerifyOutcome> outcomes_;
  std::size_t busy_ = 0;
  bool quit_ = false;
  std::thread thread_;
};

}  // namespace dnnlab::server
