// Minimal zip reading for .npz (see zip.hpp): the directory, stored and
// deflated members, with every offset and size checked against the archive.
#include "data/zip.hpp"

#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>

#include "data/file_bytes.hpp"

namespace dnnlab::data {
namespace {

constexpr uint32_t kEndSig = 0x06054b50, kDirSig = 0x02014b50, kLocalSig = 0x04034b50;
constexpr uint32_t kZip64LocatorSig = 0x07064b50;
constexpr size_t kEndSize = 22, kDirSize = 46, kLocalSize = 30;

uint16_t u16(std::string_view b, size_t at) {
  return static_cast<uint16_t>(static_cast<uint8_t>(b[at]) |
                               (static_cast<uint8_t>(b[at + 1]) << 8));
}
uint32_t u32(std::string_view b, size_t at) {
  return static_cast<uint32_t>(u16(b, at)) | (static_cast<uint32_t>(u16(b, at + 2)) << 16);
}
uint64_t u64(std::string_view b, size_t at) {
  return static_cast<uint64_t>(u32(b, at)) | (static_cast<uint64_t>(u32(b, at + 4)) << 32);
}

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08X", v);
  return buf;
}

}  // namespace

std::vector<ZipEntry> read_zip_directory(std::string_view a, const std::string& file) {
  if (a.size() < kEndSize)
    throw DataError(file, static_cast<int64_t>(a.size()),
                    "not a zip archive: " + std::to_string(a.size()) +
                        " bytes, fewer than a zip end record's 22");
  // The end record is the last 22 bytes plus a comment of up to 65535.
  size_t end = std::string_view::npos;
  const size_t lowest = a.size() > kEndSize + 65535 ? a.size() - kEndSize - 65535 : 0;
  for (size_t at = a.size() - kEndSize + 1; at-- > lowest;)
    if (u32(a, at) == kEndSig && at + kEndSize + u16(a, at + 20) == a.size()) {
      end = at;
      break;
    }
  if (end == std::string_view::npos)
    throw DataError(file, static_cast<int64_t>(a.size()),
                    "not a zip archive: no end-of-central-directory record (signature 50 4B 05 "
                    "06) in the last 65557 bytes; the file may be truncated");
  const auto e = static_cast<int64_t>(end);
  if (u16(a, end + 4) != 0 || u16(a, end + 6) != 0)
    throw DataError(file, e + 4, "archives split over several disks are not supported");
  const uint16_t count = u16(a, end + 10);
  const uint32_t dir_size = u32(a, end + 12), dir_offset = u32(a, end + 16);
  if (count == 0xFFFF || dir_size == 0xFFFFFFFFu || dir_offset == 0xFFFFFFFFu ||
      (end >= 20 && u32(a, end - 20) == kZip64LocatorSig))
    throw DataError(file, e,
                    "zip64 archives (over 4 GiB or 65535 members) are not supported; save the "
                    "arrays as separate .npy files");
  if (u16(a, end + 8) != count)
    throw DataError(file, e + 8, "the end record's two member counts differ");
  if (uint64_t{dir_offset} + dir_size > end)
    throw DataError(file, e + 16,
                    "the central directory (" + std::to_string(dir_size) + " bytes at " +
                        std::to_string(dir_offset) + ") runs past the end record at " +
                        std::to_string(end));

  std::vector<ZipEntry> out;
  size_t at = dir_offset;
  const size_t dir_end = size_t{dir_offset} + dir_size;
  for (int i = 0; i < count; ++i) {
    const auto here = static_cast<int64_t>(at);
    if (at + kDirSize > dir_end)
      throw DataError(file, here,
                      "the central directory ends inside member " + std::to_string(i) +
                          "'s record (" + std::to_string(count) + " members announced)");
    if (u32(a, at) != kDirSig)
      throw DataError(file, here,
                      "bad central directory signature " + hex32(u32(a, at)) + " for member " +
                          std::to_string(i) + " (expected 0x02014B50)");
    ZipEntry z;
    z.record_offset = here;
    z.flags = u16(a, at + 8);
    z.method = u16(a, at + 10);
    z.crc32 = u32(a, at + 16);
    z.compressed_size = u32(a, at + 20);
    z.size = u32(a, at + 24);
    const size_t name_len = u16(a, at + 28), extra_len = u16(a, at + 30),
                 comment_len = u16(a, at + 32);
    z.local_offset = u32(a, at + 42);
    const size_t next = at + kDirSize + name_len + extra_len + comment_len;
    if (next > dir_end)
      throw DataError(file, here + 28,
                      "member " + std::to_string(i) +
                          "'s name, extra field and comment run past "
                          "the central directory");
    z.name.assign(a.substr(at + kDirSize, name_len));
    // zip64 sizes: the extra field 0x0001 holds, in order, those of the
    // three that are 0xFFFFFFFF here.
    for (size_t x = at + kDirSize + name_len; x + 4 <= at + kDirSize + name_len + extra_len;) {
      const uint16_t id = u16(a, x), len = u16(a, x + 2);
      const size_t body = x + 4, stop = at + kDirSize + name_len + extra_len;
      if (body + len > stop)
        throw DataError(file, static_cast<int64_t>(x), "an extra field runs past its record");
      if (id == 0x0001) {
        size_t p = body;
        auto take = [&](uint64_t& v) {
          if (v != 0xFFFFFFFFu) return;
          if (p + 8 > body + len)
            throw DataError(file, static_cast<int64_t>(x), "a zip64 extra field is too short");
          v = u64(a, p);
          p += 8;
        };
        take(z.size);
        take(z.compressed_size);
        take(z.local_offset);
      }
      x = body + len;
    }
    if (z.local_offset >= dir_offset)
      throw DataError(file, here + 42,
                      "member '" + z.name + "' starts at " + std::to_string(z.local_offset) +
                          ", not before the central directory at " + std::to_string(dir_offset));
    out.push_back(std::move(z));
    at = next;
  }
  return out;
}

std::string zip_extract(std::string_view a, const ZipEntry& z, const std::string& file) {
  const std::string what = "member '" + z.name + "'";
  const auto local = static_cast<int64_t>(z.local_offset);
  if (z.local_offset + kLocalSize > a.size())
    throw DataError(file, local, what + "'s local header runs past the end of the archive");
  const size_t at = static_cast<size_t>(z.local_offset);
  if (u32(a, at) != kLocalSig)
    throw DataError(file, local,
                    "bad local header signature " + hex32(u32(a, at)) + " for " + what +
                        " (expected 0x04034B50)");
  if (z.flags & 1) throw DataError(file, local + 6, what + " is encrypted");
  const uint64_t data = z.local_offset + kLocalSize + u16(a, at + 26) + u16(a, at + 28);
  if (data > a.size() || z.compressed_size > a.size() - data)
    throw DataError(file, local,
                    what + "'s " + std::to_string(z.compressed_size) + " bytes at " +
                        std::to_string(data) + " run past the end of the archive (" +
                        std::to_string(a.size()) + " bytes)");
  const std::string_view packed = a.substr(static_cast<size_t>(data), z.compressed_size);
  const auto data_at = static_cast<int64_t>(data);
  if (z.size > static_cast<uint64_t>(kMaxDataFileBytes))
    throw DataError(file, z.record_offset + 24,
                    what + " is larger than " + std::to_string(kMaxDataFileBytes) + " bytes");
  std::string out;
  if (z.method == 0) {
    if (z.size != z.compressed_size)
      throw DataError(file, z.record_offset + 20,
                      what + " is stored uncompressed but its sizes differ (" +
                          std::to_string(z.compressed_size) + " and " + std::to_string(z.size) +
                          ")");
    out.assign(packed);
  } else if (z.method == 8) {
    // Deflate cannot expand more than 1032:1: a lying size fails here, not
    // in a huge allocation.
    if (z.size > z.compressed_size * 1032 + 1024)
      throw DataError(file, z.record_offset + 24,
                      what + " claims " + std::to_string(z.size) + " bytes from " +
                          std::to_string(z.compressed_size) +
                          " compressed: more than deflate can give");
    out.resize(static_cast<size_t>(z.size));
    z_stream s{};
    if (inflateInit2(&s, -15) != Z_OK) throw DataError(file, data_at, "cannot start inflate");
    uint64_t in_done = 0, out_done = 0;
    int rc = Z_OK;
    while (rc == Z_OK) {
      const uint64_t in_left = packed.size() - in_done, out_left = out.size() - out_done;
      s.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(packed.data() + in_done));
      s.avail_in = static_cast<uInt>(std::min<uint64_t>(in_left, 1u << 30));
      s.next_out = reinterpret_cast<Bytef*>(out.data() + out_done);
      s.avail_out = static_cast<uInt>(std::min<uint64_t>(out_left, 1u << 30));
      const uInt in0 = s.avail_in, out0 = s.avail_out;
      rc = inflate(&s, Z_NO_FLUSH);
      in_done += in0 - s.avail_in;
      out_done += out0 - s.avail_out;
      if (rc == Z_OK && in0 == s.avail_in && out0 == s.avail_out) rc = Z_BUF_ERROR;  // stuck
    }
    const std::string msg = s.msg ? s.msg : "";
    inflateEnd(&s);
    const int64_t where = data_at + static_cast<int64_t>(in_done);
    if (rc == Z_BUF_ERROR && out_done == out.size())
      throw DataError(file, where,
                      what + " inflates to more than the " + std::to_string(z.size) +
                          " bytes its directory record says");
    if (rc == Z_BUF_ERROR)
      throw DataError(file, where,
                      what + "'s deflate stream ends early (" + std::to_string(out_done) + " of " +
                          std::to_string(z.size) + " bytes)");
    if (rc != Z_STREAM_END)
      throw DataError(file, where,
                      what + ": corrupt deflate stream" + (msg.empty() ? "" : " (" + msg + ")"));
    if (out_done != out.size())
      throw DataError(file, where,
                      what + " inflates to " + std::to_string(out_done) + " bytes, not the " +
                          std::to_string(z.size) + " its directory record says");
  } else {
    throw DataError(file, z.record_offset + 10,
                    what + " uses compression method " + std::to_string(z.method) +
                        "; only 0 (stored) and 8 (deflate) are supported");
  }
  uLong crc = crc32(0L, Z_NULL, 0);
  for (size_t p = 0; p < out.size(); p += 1u << 30) {
    const uInt n = static_cast<uInt>(std::min<size_t>(out.size() - p, 1u << 30));
    crc = crc32(crc, reinterpret_cast<const Bytef*>(out.data() + p), n);
  }
  if (static_cast<uint32_t>(crc) != z.crc32)
    throw DataError(file, z.record_offset + 16,
                    what + "'s CRC-32 is " + hex32(static_cast<uint32_t>(crc)) + ", not the " +
                        hex32(z.crc32) + " recorded: the archive is damaged");
  return out;
}

}  // namespace dnnlab::data
