// A data file's bytes, whole: gzip-compressed files (by content: 1F 8B) are
// inflated, others read as they are. For the CSV, .npy and .npz readers,
// which parse from memory so that fuzzers and tests need no files.
//
//   std::string text = data::read_file_bytes("digits.csv.gz");   // inflated
#pragma once
#include <cstdint>
#include <string>

#include "nn/errors.hpp"

namespace dnnlab::data {

// Files larger than this (after inflating) are refused rather than read.
inline constexpr int64_t kMaxDataFileBytes = int64_t{1} << 34;

// Throws DataError: "no such file" (offset -1) for a missing file, "not a
// regular file" for a directory, device or pipe (which could block or never
// end), the offset in the inflated stream where a corrupt or truncated gzip
// stream failed, and a size over kMaxDataFileBytes.
std::string read_file_bytes(const std::string& path);

}  // namespace dnnlab::data
