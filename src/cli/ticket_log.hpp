// `train --distributed --ticket-log FILE`: each gradient ticket's end as one
// JSON line, written as the run goes and flushed after every round, so that
// a run killed midway keeps the record of what it did (docs/distributed.md,
// "A ticket's life").
#pragma once
#include <cstdio>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "hybrid/server.hpp"

namespace dnnlab::cli {

class TicketLogFile : public hybrid::TicketRecorder {
 public:
  // Creates (truncates) `path` now, before any training: UsageError naming
  // --ticket-log when it cannot be written.
  explicit TicketLogFile(const std::string& path);
  // What the last round left unwritten (a run that failed midway).
  ~TicketLogFile() override;
  void record(const hybrid::TicketRecord& r) override;
  void round() override;  // writes and flushes what the round ended
  // What metrics.json says of it: the file and the count per end.
  nlohmann::json summary() const;
  // One record as its JSON line's object.
  static nlohmann::ordered_json to_json(const hybrid::TicketRecord& r);

 private:
  std::string path_;
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file_;
  std::string pending_;
  int64_t records_ = 0;
  std::map<std::string, int64_t> by_end_;
};

}  // namespace dnnlab::cli
