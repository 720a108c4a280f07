// The training loop over in-memory data: deterministic shuffling per epoch,
// batches gathered into one reused buffer, the learning-rate schedule, and
// an observer for progress, metrics streaming and early stopping.
//
//   nn::Trainer t(model, spec.train);
//   for (int e = 0; e < spec.train.epochs; ++e) {
//     nn::EpochResult r = t.run_epoch(e, {train_x, train_y}, &val, &observer);
//   }
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include "nn/model.hpp"

namespace dnnlab::nn {

// Samples [N, ...] and their labels.
struct LabeledData {
  TensorView x;
  const int32_t* y = nullptr;
  int64_t size() const { return x.rows(); }
};

struct EpochResult {
  int epoch = 0;  // 1-based
  double train_loss = 0, train_acc = 0;
  std::optional<double> val_loss, val_acc;  // none without a validation split
  double seconds = 0;                       // training time of this epoch (no evaluation)
  double samples_per_second = 0;
  float lr = 0;
};

// The order of the training samples in 0-based `epoch`: a permutation of
// [0, n) drawn from the run's seed, the same on every platform. The Trainer
// and the hybrid trainer (src/hybrid) both cut their batches from it, so a
// distributed run sees the batches a standalone one does.
std::vector<int64_t> epoch_order(uint64_t seed, int epoch, int64_t n);

class TrainObserver {
 public:
  virtual ~TrainObserver() = default;
  // Called about every `batch_interval()` batches and after the last one.
  virtual void on_batch(int epoch, int64_t samples_done, int64_t samples_total, double loss,
                        double accuracy, double seconds) {}
  // Return false to stop after this epoch (pruned, cancelled).
  virtual bool on_epoch(const EpochResult& r) { return true; }
  virtual int64_t batch_interval() const { return 50; }
  // Checked with every on_batch call: true ends training at once (the epoch
  // is left unfinished and not reported; Ctrl-C, a lost lease).
  virtual bool interrupted() const { return false; }
};

class Trainer {
 public:
  Trainer(Model& model, const TrainSpec& spec);
  // One epoch (0-based `epoch`) of training, then evaluation on `val` if given.
  EpochResult run_epoch(int epoch, const LabeledData& train, const LabeledData* val,
                        TrainObserver* obs);
  // The same epoch in pieces, for a caller that must return to its event
  // loop between them (the browser core): run_epoch is begin_epoch, then
  // epoch_batches until it returns true, then end_epoch; the numbers are the
  // same whatever the pieces. `train` must stay the same set throughout.
  void begin_epoch(int epoch, const LabeledData& train);
  // Up to `max_batches` more batches (<= 0: all that are left); true when
  // the epoch's last batch is done (or obs->interrupted()).
  bool epoch_batches(const LabeledData& train, int64_t max_batches, TrainObserver* obs);
  EpochResult end_epoch(const LabeledData* val, TrainObserver* obs);
  bool in_epoch() const { return in_epoch_; }
  void abandon_epoch() { in_epoch_ = false; }  // the weights keep what it trained
  int64_t epoch_samples_done() const { return done_; }
  int64_t epoch_samples() const { return static_cast<int64_t>(order_.size()); }
  // All epochs; stops early when the observer says so (on_epoch returns
  // false, or interrupted() becomes true: then the last epoch is dropped).
  std::vector<EpochResult> fit(const LabeledData& train, const LabeledData* val,
                               TrainObserver* obs);
  Optimizer& optimizer() { return opt_; }

 private:
  Model& model_;
  TrainSpec spec_;
  Optimizer opt_;
  Tensor batch_x_;
  std::vector<int32_t> batch_y_;
  std::vector<int64_t> order_;
  // The epoch in progress.
  bool in_epoch_ = false;
  int epoch_ = 0;
  int64_t done_ = 0, batches_ = 0;
  double loss_sum_ = 0, acc_sum_ = 0, seconds_ = 0;  // seconds: in epoch_batches only
};

}  // namespace dnnlab::nn
