// Reads a study from the store: every trial of an experiment with its
// parameters, status, last reported accuracy and training time per epoch,
// and picks the axes (depth, family, activation) from the sweep's
// parameters, falling back to another numeric parameter, and saying so in
// Study::notes, when the sweep has no `depth`.
//
//   auto store = store::open_result_store("sqlite:dnnlab.db");
//   report::Study s = report::gather(*store, 7, {});
#pragma once
#include <cstdint>
#include <string>

#include "report/study.hpp"
#include "store/result_store.hpp"

namespace dnnlab::report {

struct GatherOptions {
  // Where the data sets are (as `--data`): for the class count (chance) and
  // the samples per epoch; a data set not found here leaves them from the
  // model's read-out layer and unknown, with a note.
  std::string data_dir;
};

// Throws std::invalid_argument when the experiment does not exist.
Study gather(store::ResultStore& store, std::int64_t experiment_id, const GatherOptions& options);

}  // namespace dnnlab::report
