// The data root check for specs from other people (data_root.hpp).
#include "data/data_root.hpp"

#include <algorithm>
#include <filesystem>
#include <utility>

#include "nn/errors.hpp"

namespace dnnlab::data {

namespace fs = std::filesystem;

bool inside_root(const std::string& path, const std::string& root) {
  if (root.empty() || path.empty()) return false;
  std::error_code ec;
  const fs::path p = fs::weakly_canonical(fs::path(path), ec);
  if (ec) return false;
  fs::path r = fs::weakly_canonical(fs::absolute(fs::path(root), ec), ec);
  if (ec) return false;
  // "/srv/data/" and "/srv/data" are one root: compare without the empty
  // last element a trailing slash leaves.
  if (!r.has_filename()) r = r.parent_path();
  auto pi = p.begin();
  for (auto ri = r.begin(); ri != r.end(); ++ri, ++pi)
    if (pi == p.end() || *pi != *ri) return false;
  return true;
}

namespace {
thread_local const std::string* scoped_root = nullptr;
}

DataRootScope::DataRootScope(std::string root) : root_(std::move(root)), outer_(scoped_root) {
  scoped_root = &root_;
}

DataRootScope::~DataRootScope() {
  scoped_root = outer_;
}

void check_scoped_root(const std::string& path, const std::string& labels,
                       const std::string& test_path, const std::string& test_labels) {
  if (!scoped_root) return;
  nn::DataSpec d;
  d.path = path;
  d.labels = labels;
  d.test_path = test_path;
  d.test_labels = test_labels;
  try {
    check_data_root(d, *scoped_root, "data");
  } catch (const SpecError& e) {
    // The message without the location: the spec parser places it.
    const std::string what = e.what(), mark = "'" + e.field() + "': ";
    const auto at = what.find(mark);
    throw DataError(e.field(), -1, at == std::string::npos ? what : what.substr(at + mark.size()));
  }
}

void check_data_root(const nn::DataSpec& spec, const std::string& root,
                     const std::string& field_prefix, const std::string& file) {
  const std::pair<const char*, const std::string*> keys[] = {{"path", &spec.path},
                                                             {"labels", &spec.labels},
                                                             {"test_path", &spec.test_path},
                                                             {"test_labels", &spec.test_labels}};
  for (const auto& [key, value] : keys) {
    if (value->empty()) continue;
    const std::string field = field_prefix + "." + key;
    if (root.empty())
      throw SpecError({file}, field,
                      "data files by path are not accepted from a submitted sweep: this server "
                      "has no data root (start it with --data DIR to allow files inside DIR)");
    if (!fs::path(*value).is_absolute())
      throw SpecError({file}, field,
                      "'" + *value +
                          "' is relative: a submitted sweep must name data files by absolute "
                          "path inside the server's data root");
    if (!inside_root(*value, root))
      throw SpecError({file}, field,
                      "'" + *value +
                          "' is outside the server's data root (symbolic links and '..' "
                          "resolved): a submitted sweep may only read files inside it");
  }
}

}  // namespace dnnlab::data
