#include "nn/train.hpp"

#include <chrono>
#include <cstring>

namespace dnnlab::nn {

Trainer::Trainer(Model& model, const TrainSpec& spec)
    : model_(model), spec_(spec), opt_(spec.optimizer, model.params()) {}

EpochResult Trainer::run_epoch(int epoch, const LabeledData& train, const LabeledData* val,
                               TrainObserver* obs) {
  using Clock = std::chrono::steady_clock;
  const int64_t n = train.size(), row = train.x.cols();
  const int64_t bs = std::min<int64_t>(spec_.batch_size, n);
  if (n == 0) throw ShapeError("the training split is empty");

  // Same seed and epoch => same order, on every platform.
  order_.resize(n);
  for (int64_t i = 0; i < n; ++i) order_[i] = i;
  Rng rng(derive_seed(spec_.seed, 0x5EED0000ull + static_cast<uint64_t>(epoch)));
  for (int64_t i = n - 1; i > 0; --i) std::swap(order_[i], order_[rng.below(i + 1)]);

  opt_.set_lr(scheduled_lr(spec_.optimizer.lr, spec_.schedule, epoch, spec_.epochs));
  Shape bshape = train.x.shape();
  bshape[0] = bs;
  batch_x_.resize(bshape);
  batch_y_.resize(bs);

  const auto start = Clock::now();
  double loss_sum = 0, acc_sum = 0;
  int64_t done = 0, batches = 0;
  const int64_t interval = obs ? std::max<int64_t>(1, obs->batch_interval()) : 0;
  for (int64_t b = 0; b < n; b += bs) {
    const int64_t cnt = std::min(bs, n - b);
    float* dst = batch_x_.data();
    for (int64_t i = 0; i < cnt; ++i) {
      const int64_t src = order_[b + i];
      std::memcpy(dst + i * row, train.x.data() + src * row, sizeof(float) * row);
      batch_y_[i] = train.y[src];
    }
    float acc = 0;
    const float loss = model_.train_step(batch_x_.view().rows(0, cnt), batch_y_.data(), opt_, &acc);
    loss_sum += static_cast<double>(loss) * cnt;
    acc_sum += static_cast<double>(acc) * cnt;
    done += cnt;
    if (obs && (++batches % interval == 0 || done == n)) {
      obs->on_batch(epoch + 1, done, n, loss_sum / done, acc_sum / done,
                    std::chrono::duration<double>(Clock::now() - start).count());
      if (obs->interrupted()) break;
    }
  }
  EpochResult r;
  r.epoch = epoch + 1;
  r.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  r.train_loss = done ? loss_sum / done : 0;
  r.train_acc = done ? acc_sum / done : 0;
  r.samples_per_second = r.seconds > 0 ? done / r.seconds : 0;
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
