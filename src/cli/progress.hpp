// Terminal progress for long work: a bar redrawn in place on a terminal, a
// plain line per epoch when output is a file or pipe.
#pragma once
#include <cstdio>
#include <string>

#include "nn/train.hpp"

namespace dnnlab::cli {

std::string format_duration(double seconds);  // "1:05", "2:03:04"
std::string format_rate(double per_second);   // "52.1k"

class EpochProgress : public nn::TrainObserver {
 public:
  EpochProgress(int epochs, bool quiet);
  void on_batch(int epoch, int64_t done, int64_t total, double loss, double acc,
                double seconds) override;
  bool on_epoch(const nn::EpochResult& r) override;
  int64_t batch_interval() const override { return 20; }

 private:
  int epochs_;
  bool quiet_, tty_;
};

}  // namespace dnnlab::cli
