// The ticket log's file: JSON lines, flushed per round.
#include "cli/ticket_log.hpp"

#include <cerrno>
#include <cmath>
#include <cstring>

#include "cli/commands.hpp"

namespace dnnlab::cli {

TicketLogFile::TicketLogFile(const std::string& path)
    : path_(path), file_(std::fopen(path.c_str(), "w"), &std::fclose) {
  if (!file_) throw UsageError("--ticket-log: cannot write " + path + ": " + std::strerror(errno));
  for (hybrid::TicketEnd e :
       {hybrid::TicketEnd::kApplied, hybrid::TicketEnd::kAppliedStale, hybrid::TicketEnd::kDropped,
        hybrid::TicketEnd::kReissued, hybrid::TicketEnd::kLate})
    by_end_[hybrid::ticket_end_name(e)] = 0;
}

TicketLogFile::~TicketLogFile() {
  if (!pending_.empty()) std::fwrite(pending_.data(), 1, pending_.size(), file_.get());
}

nlohmann::ordered_json TicketLogFile::to_json(const hybrid::TicketRecord& r) {
  // Seconds to the microsecond; null for a step that did not happen.
  auto when = [](double s) {
    return s < 0 ? nlohmann::ordered_json(nullptr)
                 : nlohmann::ordered_json(std::round(s * 1e6) / 1e6);
  };
  nlohmann::ordered_json j = {{"ticket", r.ticket},
                              {"client", r.client},
                              {"epoch", r.epoch},
                              {"version", r.version},
                              {"begin", r.begin},
                              {"rows", r.rows},
                              {"leased", when(r.leased)},
                              {"activations", when(r.activations)},
                              {"gradients", when(r.gradients)},
                              {"end", hybrid::ticket_end_name(r.end)},
                              {"rechecked", r.rechecked}};
  if (r.end == hybrid::TicketEnd::kAppliedStale || r.why == "too_stale") j["age"] = r.age;
  if (!r.why.empty()) j["why"] = r.why;
  if (r.rechecked) j["recheck_passed"] = r.recheck_passed;
  return j;
}

void TicketLogFile::record(const hybrid::TicketRecord& r) {
  pending_ += to_json(r).dump();
  pending_ += '\n';
  ++records_;
  ++by_end_[hybrid::ticket_end_name(r.end)];
}

void TicketLogFile::round() {
  if (pending_.empty()) return;
  if (std::fwrite(pending_.data(), 1, pending_.size(), file_.get()) != pending_.size() ||
      std::fflush(file_.get()) != 0)
    throw std::runtime_error("--ticket-log: cannot write " + path_ + ": " + std::strerror(errno));
  pending_.clear();
}

nlohmann::json TicketLogFile::summary() const {
  return {{"file", path_}, {"records", records_}, {"by_end", by_end_}};
}

}  // namespace dnnlab::cli
