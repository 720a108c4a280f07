// IDX files, raw or gzip (zlib's gz* reads both): an array or a DataError.
// read_idx takes a path, so each input is written to one scratch file.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include "data/idx.hpp"

namespace {
std::string scratch_path(bool gz) {
  return "/tmp/dnnlab-fuzz-idx-" + std::to_string(getpid()) + (gz ? ".gz" : "");
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  // The first byte chooses the name: a .gz name must hold a gzip stream.
  const std::string path = scratch_path(data[0] & 1);
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return 0;
  std::fwrite(data + 1, 1, size - 1, f);
  std::fclose(f);
  try {
    dnnlab::data::IdxArray a = dnnlab::data::read_idx(path);
    int64_t n = 1;
    for (int64_t d : a.dims) n *= d;
    if (static_cast<size_t>(n) != a.bytes.size()) __builtin_trap();
  } catch (const dnnlab::DataError&) {
  }
  std::remove(path.c_str());
  return 0;
}
