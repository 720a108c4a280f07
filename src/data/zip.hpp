// The least of the zip format that .npz files need: the central directory,
// and members stored (method 0) or deflated (method 8), CRC-checked. Parsed
// from memory; every defect is a DataError naming the byte offset in the
// archive. Not supported, each with its own error: encryption, other
// methods, archives split over disks, and zip64 end records (archives over
// 4 GiB or 65535 members); zip64 sizes in a member's extra field are read.
//
//   std::string bytes = read_file_bytes("mnist.npz");
//   for (const ZipEntry& e : read_zip_directory(bytes, "mnist.npz"))
//     std::string member = zip_extract(bytes, e, "mnist.npz");   // "x_train.npy", ...
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "nn/errors.hpp"

namespace dnnlab::data {

struct ZipEntry {
  std::string name;
  uint16_t method = 0;  // 0 stored, 8 deflated
  uint16_t flags = 0;
  uint32_t crc32 = 0;
  uint64_t compressed_size = 0, size = 0;
  uint64_t local_offset = 0;  // its local header
  int64_t record_offset = 0;  // its central directory record
};

// The members, in the central directory's order. Throws DataError for a
// missing end record, a directory outside the archive, bad signatures,
// names outside it, and members beyond its end.
std::vector<ZipEntry> read_zip_directory(std::string_view archive, const std::string& file);

// One member's bytes. Throws DataError for a bad local header, an
// unsupported method or encryption, a corrupt deflate stream (the offset is
// where in the archive it failed), a size or CRC that does not match.
std::string zip_extract(std::string_view archive, const ZipEntry& entry, const std::string& file);

}  // namespace dnnlab::data
