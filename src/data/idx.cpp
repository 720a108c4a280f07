// IDX reading through zlib's gz* API, which reads gzip and raw files alike.
#include "data/idx.hpp"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>

namespace dnnlab::data {
namespace {

struct GzClose {
  void operator()(gzFile_s* f) const { gzclose(f); }
};
using GzFile = std::unique_ptr<gzFile_s, GzClose>;

std::string hex_byte(unsigned v) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "0x%02X", v & 0xFFu);
  return buf;
}

const char* idx_type_name(uint8_t t) {
  switch (t) {
    case 0x08:
      return "unsigned byte";
    case 0x09:
      return "signed byte";
    case 0x0B:
      return "int16";
    case 0x0C:
      return "int32";
    case 0x0D:
      return "float32";
    case 0x0E:
      return "float64";
    default:
      return nullptr;
  }
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Sequential reader that tracks the decompressed offset and turns zlib
// errors into DataError.
class IdxStream {
 public:
  explicit IdxStream(const std::string& path) : path_(path) {
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec))
      throw DataError(path, -1, "is a directory, not an IDX file");
    errno = 0;
    file_.reset(gzopen(path.c_str(), "rb"));
    if (!file_) {
      int e = errno;
      if (e == ENOENT || e == 0) throw DataError(path, -1, "no such file");
      throw DataError(path, -1, std::string("cannot open: ") + std::strerror(e));
    }
    gzbuffer(file_.get(), 1u << 20);  // big reads keep inflate at full speed
  }

  // Reads up to n bytes; returns how many were read (fewer only at the end).
  size_t read(uint8_t* dst, size_t n) {
    size_t got = 0;
    while (got < n) {
      unsigned chunk = static_cast<unsigned>(std::min<size_t>(n - got, 1u << 30));
      int r = gzread(file_.get(), dst + got, chunk);
      if (r < 0) {
        int code = 0;
        const char* msg = gzerror(file_.get(), &code);
        throw DataError(path_, offset_ + static_cast<int64_t>(got),
                        std::string("corrupt gzip stream: ") + (msg ? msg : "unknown zlib error"));
      }
      if (first_read_) {
        first_read_ = false;
        if (ends_with(path_, ".gz") && gzdirect(file_.get()))
          throw DataError(path_, 0,
                          "not a gzip file (the name ends in .gz but the 1F 8B header is missing)");
      }
      if (r == 0) {
        int code = Z_OK;
        gzerror(file_.get(), &code);
        if (code == Z_BUF_ERROR)  // the gzip stream itself was cut short
          throw DataError(path_, offset_ + static_cast<int64_t>(got),
                          "corrupt gzip stream: unexpected end of compressed data");
        break;
      }
      got += static_cast<size_t>(r);
    }
    offset_ += static_cast<int64_t>(got);
    return got;
  }

  // Reads exactly n bytes or throws, naming what was being read.
  void read_exact(uint8_t* dst, size_t n, const char* what) {
    size_t got = read(dst, n);
    if (got < n)
      throw DataError(
          path_, offset_,
          std::string("file ends at byte ") + std::to_string(offset_) + " inside the " + what);
  }

  int64_t offset() const { return offset_; }

 private:
  std::string path_;
  GzFile file_;
  int64_t offset_ = 0;
  bool first_read_ = true;
};

// A corrupt header must not make us allocate terabytes: dims are checked
// against this before any data is read.
constexpr int64_t kMaxIdxBytes = int64_t{1} << 36;

}  // namespace

IdxArray read_idx(const std::string& path) {
  IdxStream in(path);
  IdxArray out;

  uint8_t magic[4];
  in.read_exact(magic, 4, "header");
  if (magic[0] != 0 || magic[1] != 0)
    throw DataError(path, magic[0] != 0 ? 0 : 1,
                    "bad magic: IDX files start with two zero bytes, found " + hex_byte(magic[0]) +
                        " " + hex_byte(magic[1]));
  out.type = magic[2];
  if (out.type != kIdxUbyte) {
    const char* name = idx_type_name(out.type);
    throw DataError(path, 2,
                    name ? "unsupported element type " + hex_byte(out.type) + " (" + name +
                               "); only 0x08 (unsigned byte) is supported"
                         : "unknown element type " + hex_byte(out.type) +
                               " (valid IDX types: 0x08, 0x09, 0x0B, 0x0C, 0x0D, 0x0E)");
  }
  const int ndim = magic[3];
  if (ndim < 1 || ndim > 4)
    throw DataError(path, 3, "number of dimensions is " + std::to_string(ndim) + ", expected 1..4");

  int64_t total = 1;
  for (int i = 0; i < ndim; ++i) {
    uint8_t b[4];
    in.read_exact(b, 4, "dimension sizes");
    int64_t d = (int64_t{b[0]} << 24) | (int64_t{b[1]} << 16) | (int64_t{b[2]} << 8) | b[3];
    int64_t at = 4 + 4 * i;
    if (d == 0) throw DataError(path, at, "dimension " + std::to_string(i) + " is 0");
    // Checked before multiplying: total (<= 2^36) times d (< 2^32) would
    // overflow int64 and could wrap to a small size (0 for 2^31 x 2^31 x 4).
    if (d > kMaxIdxBytes / total)
      throw DataError(path, at, "data size exceeds " + std::to_string(kMaxIdxBytes) + " bytes");
    total *= d;
    out.dims.push_back(d);
  }

  const int64_t header = 4 + 4 * ndim;
  // A lying header on a short file must fail before a huge allocation: the
  // data cannot exceed deflate's largest ratio (1032:1) times the file size,
  // so real files get one exact allocation and liars a small one, then growth.
  const size_t want = static_cast<size_t>(total);
  std::error_code ec;
  const uintmax_t disk = std::filesystem::file_size(path, ec);
  const size_t bound = ec ? size_t{16} << 20 : static_cast<size_t>(disk) * 1032 + 4096;
  size_t have = 0;
  size_t cap = std::min(want, bound);
  out.bytes.resize(cap);
  for (;;) {
    have += in.read(out.bytes.data() + have, cap - have);
    if (have < cap || cap == want) break;
    cap = std::min(want, cap * 2);
    out.bytes.resize(cap);
  }
  if (have < want) {
    std::string dims;
    for (size_t i = 0; i < out.dims.size(); ++i)
      dims += (i ? "x" : "") + std::to_string(out.dims[i]);
    throw DataError(path, in.offset(),
                    "truncated: data ends at byte " + std::to_string(in.offset()) + " but " + dims +
                        " bytes after the " + std::to_string(header) + "-byte header need " +
                        std::to_string(header + total));
  }
  uint8_t extra;
  if (in.read(&extra, 1) != 0)
    throw DataError(
        path, header + total,
        "trailing bytes after the data, which ends at byte " + std::to_string(header + total));
  return out;
}

}  // namespace dnnlab::data
