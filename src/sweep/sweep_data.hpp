// Every data set a sweep's trials can train on, for checks that must see
// each file a trial may read (the server's data root, data_root.hpp) before
// the sweep is accepted.
//
//   for (const nn::DataSpec& d : sweep::data_specs(sweep))
//     data::check_data_root(d, root, "template.data", sweep.file);
#pragma once
#include <vector>

#include "nn/spec.hpp"
#include "sweep/sweep_spec.hpp"

namespace dnnlab::sweep {

// The distinct data specs of the template under every combination of the
// check values (ParamSpec::check_values) of the parameters that change a
// data file's name (path, labels, test_path, test_labels): those with a
// placeholder in the template's data section that changes a name when
// varied alone. Values substituted into a name are choices (any text)
// or numbers (no '/' and no "..": a range's inner values name files beside
// its ends'). Throws SpecError when those parameters have more than 4096
// combinations.
std::vector<nn::DataSpec> data_specs(const SweepSpec& sweep);

}  // namespace dnnlab::sweep
