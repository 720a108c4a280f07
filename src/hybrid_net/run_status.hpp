// The live status of a distributed run, for its run page (/hybrid/run) and
// GET /hybrid/status (docs/distributed.md "Watching a run"): the trainer's
// thread builds a JSON snapshot now and then and swaps it in; the io thread
// only hands the latest one out, so a watcher never holds the trainer.
//
//   hybrid_net::RunStatusBoard board(spec.train.epochs, "fp32", 0);
//   eo.files["/hybrid/status"] = {"application/json", nullptr, true,
//                                 [&board] { return board.latest(); }};
//   hybrid_net::RunStatusObserver watch(board, server, endpoint, &progress);
//   server.fit(train, val, &watch);
//   watch.finished();
#pragma once
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "hybrid/server.hpp"
#include "nn/train.hpp"

namespace dnnlab::hybrid_net {

class HybridEndpoint;

// What the page shows, as JSON: the run's counters, the server's compute
// and idle seconds, samples/s of each part, one row per client and the
// per-epoch curve. Bounded: at most hybrid::kMaxClients rows and the last
// kMaxCurve epochs.
struct RunStatusInput {
  std::string state;                      // "waiting", "training", "finished"
  double seconds = 0, train_seconds = 0;  // since the server started; since training started
  int epoch = 0, epochs = 0;              // the epoch in progress (1-based), of how many
  int64_t samples_done = 0, samples_total = 0;
  uint64_t version = 0;
  int staleness = 0;
  std::string wire;
  const hybrid::HybridStats* stats = nullptr;  // null while waiting
  std::vector<std::string> agents;             // by client id
  const std::vector<nn::EpochResult>* curve = nullptr;
};
inline constexpr size_t kMaxCurve = 1000;
nlohmann::json status_json(const RunStatusInput& in);

// The latest snapshot, swapped under a short lock.
class RunStatusBoard {
 public:
  explicit RunStatusBoard(std::string first);
  void publish(std::string json);
  std::shared_ptr<const std::string> latest() const;

 private:
  mutable std::mutex mu_;
  std::shared_ptr<const std::string> latest_;
};

// Passes every call on to `inner` (as often as it asks) and publishes a
// snapshot on the trainer's thread: after a batch at most every
// `min_interval` seconds, after each epoch, and at the end (finished()).
class RunStatusObserver : public nn::TrainObserver {
 public:
  RunStatusObserver(RunStatusBoard& board, const hybrid::HybridServer& server,
                    const HybridEndpoint& endpoint, nn::TrainObserver* inner, int epochs,
                    int staleness, std::string wire, double min_interval = 0.25);
  void on_batch(int epoch, int64_t done, int64_t total, double loss, double accuracy,
                double seconds) override;
  bool on_epoch(const nn::EpochResult& r) override;
  int64_t batch_interval() const override { return 1; }
  bool interrupted() const override { return inner_ && inner_->interrupted(); }
  void finished();

 private:
  void publish(const char* state);
  RunStatusBoard& board_;
  const hybrid::HybridServer& server_;
  const HybridEndpoint& endpoint_;
  nn::TrainObserver* inner_;
  int epochs_, staleness_;
  std::string wire_;
  double min_interval_, train_start_, last_ = -1;
  int epoch_ = 1;
  int64_t calls_ = 0, done_ = 0, total_ = 0;
  std::vector<nn::EpochResult> curve_;
};

}  // namespace dnnlab::hybrid_net
