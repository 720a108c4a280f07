#include "cli/progress.hpp"

#include <unistd.h>

#include <cmath>

namespace dnnlab::cli {

std::string format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  const long t = std::lround(s);
  char buf[32];
  if (t >= 3600)
    std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
  else
    std::snprintf(buf, sizeof buf, "%ld:%02ld", t / 60, t % 60);
  return buf;
}

std::string format_rate(double r) {
  char buf[32];
  if (r >= 1e6)
    std::snprintf(buf, sizeof buf, "%.2fM", r / 1e6);
  else if (r >= 1e3)
    std::snprintf(buf, sizeof buf, "%.1fk", r / 1e3);
  else
    std::snprintf(buf, sizeof buf, "%.1f", r);
  return buf;
}

EpochProgress::EpochProgress(int epochs, bool quiet)
    : epochs_(epochs), quiet_(quiet), tty_(isatty(STDERR_FILENO)) {}

void EpochProgress::on_batch(int epoch, int64_t done, int64_t total, double loss, double acc,
                             double seconds) {
  if (quiet_ || !tty_) return;
  constexpr int kWidth = 24;
  const int fill = static_cast<int>(kWidth * done / std::max<int64_t>(total, 1));
  const double rate = seconds > 0 ? done / seconds : 0;
  const double eta = rate > 0 ? (total - done) / rate : 0;
  std::fprintf(stderr, "\repoch %d/%d [%s%s] %lld/%lld  %s samples/s  loss %.4f  acc %.4f  ETA %s ",
               epoch, epochs_, std::string(fill, '#').c_str(),
               std::string(kWidth - fill, '.').c_str(), static_cast<long long>(done),
               static_cast<long long>(total), format_rate(rate).c_str(), loss, acc,
               format_duration(eta).c_str());
  std::fflush(stderr);
}

bool EpochProgress::on_epoch(const nn::EpochResult& r) {
  if (quiet_) return true;
  char val[96] = "";  // nothing without validation data
  if (r.val_loss && r.val_acc)
    std::snprintf(val, sizeof val, "  val_loss %.4f  val_acc %.4f", *r.val_loss, *r.val_acc);
  std::fprintf(stderr, "%sepoch %d/%d  %s  %s samples/s  loss %.4f  acc %.4f%s  lr %.3g\n",
               tty_ ? "\r\033[K" : "", r.epoch, epochs_, format_duration(r.seconds).c_str(),
               format_rate(r.samples_per_second).c_str(), r.train_loss, r.train_acc, val, r.lr);
  return true;
}

}  // namespace dnnlab::cli
