// Data files named by a spec that someone else wrote: a sweep submitted over
// the REST API (any holder of the write token) may only name files inside
// the server's data root, or it could make the server read any file the
// server can (docs/security.md, "Data files"). Local runs (`dnnlab run`,
// `train`) trust their user and never call this.
//
//   data::DataRootScope only_inside("/srv/dnnlab-data");  // this thread, this scope
//   auto sweep = sweep::parse_sweep(text, name);  // reads no file outside it
//   data::check_data_root(run.data, "/srv/dnnlab-data", "template.data");
//   // throws SpecError naming "template.data.path" for "/etc/passwd"
#pragma once
#include <string>

#include "nn/spec.hpp"

namespace dnnlab::data {

// Checks `path`, `labels`, `test_path` and `test_labels` of `spec`: each
// that is set must be absolute (the workers resolve relative ones against
// their own working directories) and, resolved by
// std::filesystem::weakly_canonical (symbolic links followed, `..` removed),
// inside weakly_canonical(root). An empty root allows no file at all. Throws
// SpecError whose field is `field_prefix` + "." + the key (e.g.
// "template.data.path"), located in `file`.
void check_data_root(const nn::DataSpec& spec, const std::string& root,
                     const std::string& field_prefix, const std::string& file = "");

// True when `path` (absolute), resolved as above, lies inside `root`.
bool inside_root(const std::string& path, const std::string& root);

// While one lives, this thread's data::sample_shape and data::load refuse
// (DataError, before opening anything) files named by LoadOptions::path and
// the keys beside it that check_data_root would refuse: parsing a spec reads
// its files' headers, and a stranger's spec must not make the server read
// (or say whether it could read) any other file. Named data sets are not
// affected. Scopes nest; the innermost applies.
class DataRootScope {
 public:
  explicit DataRootScope(std::string root);
  ~DataRootScope();
  DataRootScope(const DataRootScope&) = delete;
  DataRootScope& operator=(const DataRootScope&) = delete;

 private:
  std::string root_;
  const std::string* outer_;
};

// Throws DataError for a file of `path`, `labels`, `test_path`,
// `test_labels` outside the innermost DataRootScope of this thread; nothing
// without one.
void check_scoped_root(const std::string& path, const std::string& labels,
                       const std::string& test_path, const std::string& test_labels);

}  // namespace dnnlab::data
