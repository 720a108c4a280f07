// Whole-file reads through zlib's gz* API, which reads gzip and raw files alike.
#include "data/file_bytes.hpp"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>

namespace dnnlab::data {
namespace {
struct GzClose {
  void operator()(gzFile_s* f) const { gzclose(f); }
};
}  // namespace

std::string read_file_bytes(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec || st.type() == fs::file_type::not_found) throw DataError(path, -1, "no such file");
  if (st.type() != fs::file_type::regular)
    throw DataError(path, -1, "not a regular file (a directory, device or pipe)");
  const uintmax_t disk = fs::file_size(path, ec);
  errno = 0;
  std::unique_ptr<gzFile_s, GzClose> f(gzopen(path.c_str(), "rb"));
  if (!f) throw DataError(path, -1, std::string("cannot open: ") + std::strerror(errno));
  gzbuffer(f.get(), 1u << 20);
  std::string out;
  // The inflated size is not known up front: start from the size on disk.
  out.resize(static_cast<size_t>(std::min<uintmax_t>(ec ? 1u << 20 : disk + 1, 1u << 30)));
  size_t have = 0;
  for (;;) {
    if (have == out.size()) {
      if (static_cast<int64_t>(out.size()) > kMaxDataFileBytes)
        throw DataError(path, kMaxDataFileBytes,
                        "larger than " + std::to_string(kMaxDataFileBytes) + " bytes");
      out.resize(out.size() * 2);
    }
    const unsigned chunk = static_cast<unsigned>(std::min<size_t>(out.size() - have, 1u << 30));
    const int r = gzread(f.get(), out.data() + have, chunk);
    if (r < 0) {
      int code = 0;
      const char* msg = gzerror(f.get(), &code);
      throw DataError(path, static_cast<int64_t>(have),
                      std::string("corrupt gzip stream: ") + (msg ? msg : "unknown zlib error"));
    }
    if (r == 0) {
      int code = Z_OK;
      gzerror(f.get(), &code);
      if (code == Z_BUF_ERROR)
        throw DataError(path, static_cast<int64_t>(have),
                        "corrupt gzip stream: unexpected end of compressed data");
      break;
    }
    have += static_cast<size_t>(r);
  }
  out.resize(have);
  return out;
}

}  // namespace dnnlab::data
