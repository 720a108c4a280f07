#include "nn/train.hpp"

#include <chrono>
#include <cstring>
#include <stdexcept>

namespace dnnlab::nn {

std::vector<int64_t> epoch_order(uint64_t seed, int epoch, int64_t n) {
  // Same seed and epoch => same order, on every platform.
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[i] = i;
  Rng rng(derive_seed(seed, 0x5EED0000ull + static_cast<uint64_t>(epoch)));
  for (int64_t i = n - 1; i > 0; --i) std::swap(order[i], order[rng.below(i + 1)]);
  return order;
}

Trainer::Trainer(Model& model, const TrainSpec& spec)
    : model_(model), spec_(spec), opt_(spec.optimizer, model.params()) {}

EpochResult Trainer::run_epoch(int epoch, const LabeledData& train, const LabeledData* val,
                               TrainObserver* obs) {
  begin_epoch(epoch, train);
  epoch_batches(train, 0, obs);
  return end_epoch(val, obs);
}

void Trainer::begin_epoch(int epoch, const LabeledData& train) {
  const int64_t n = train.size();
  const int64_t bs = std::min<int64_t>(spec_.batch_size, n);
  if (n == 0) throw ShapeError("the training split is empty");

  order_ = epoch_order(spec_.seed, epoch, n);

  opt_.set_lr(scheduled_lr(spec_.optimizer.lr, spec_.schedule, epoch, spec_.epochs));
  Shape bshape = train.x.shape();
  bshape[0] = bs;
  batch_x_.resize(bshape);
  batch_y_.resize(bs);
  in_epoch_ = true;
  epoch_ = epoch;
  done_ = batches_ = 0;
  loss_sum_ = acc_sum_ = seconds_ = 0;
}

bool Trainer::epoch_batches(const LabeledData& train, int64_t max_batches, TrainObserver* obs) {
  using Clock = std::chrono::steady_clock;
  if (!in_epoch_) throw std::logic_error("epoch_batches: no epoch begun");
  const int64_t n = static_cast<int64_t>(order_.size()), row = train.x.cols();
  if (train.size() != n) throw ShapeError("epoch_batches: the training set changed mid-epoch");
  const int64_t bs = batch_x_.shape()[0];
  const auto start = Clock::now();
  const int64_t interval = obs ? std::max<int64_t>(1, obs->batch_interval()) : 0;
  bool stop = false;
  for (int64_t k = 0; done_ < n && (max_batches <= 0 || k < max_batches); ++k) {
    const int64_t cnt = std::min(bs, n - done_);
    float* dst = batch_x_.data();
    for (int64_t i = 0; i < cnt; ++i) {
      const int64_t src = order_[done_ + i];
      std::memcpy(dst + i * row, train.x.data() + src * row, sizeof(float) * row);
      batch_y_[i] = train.y[src];
    }
    float acc = 0;
    const float loss = model_.train_step(batch_x_.view().rows(0, cnt), batch_y_.data(), opt_, &acc);
    loss_sum_ += static_cast<double>(loss) * cnt;
    acc_sum_ += static_cast<double>(acc) * cnt;
    done_ += cnt;
    if (obs && (++batches_ % interval == 0 || done_ == n)) {
      obs->on_batch(epoch_ + 1, done_, n, loss_sum_ / done_, acc_sum_ / done_,
                    seconds_ + std::chrono::duration<double>(Clock::now() - start).count());
      if (obs->interrupted()) {
        stop = true;
        break;
      }
    }
  }
  seconds_ += std::chrono::duration<double>(Clock::now() - start).count();
  return stop || done_ == n;
}

EpochResult Trainer::end_epoch(const LabeledData* val, TrainObserver* obs) {
  if (!in_epoch_) throw std::logic_error("end_epoch: no epoch begun");
  in_epoch_ = false;
  EpochResult r;
  r.epoch = epoch_ + 1;
  r.seconds = seconds_;
  r.train_loss = done_ ? loss_sum_ / done_ : 0;
  r.train_acc = done_ ? acc_sum_ / done_ : 0;
  r.samples_per_second = r.seconds > 0 ? done_ / r.seconds : 0;
  r.lr = opt_.lr();
  if (val && val->size() > 0 && !(obs && obs->interrupted())) {
    LossAndAccuracy v = model_.evaluate(val->x, val->y);
    r.val_loss = v.loss;
    r.val_acc = v.accuracy;
  }
  return r;
}

std::vector<EpochResult> Trainer::fit(const LabeledData& train, const LabeledData* val,
                                      TrainObserver* obs) {
  std::vector<EpochResult> out;
  for (int e = 0; e < spec_.epochs; ++e) {
    EpochResult r = run_epoch(e, train, val, obs);
    if (obs && obs->interrupted()) break;
    out.push_back(r);
    if (obs && !obs->on_epoch(out.back())) break;
  }
  return out;
}

}  // namespace dnnlab::nn
