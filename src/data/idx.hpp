// Reader for IDX files, the format of MNIST and Fashion-MNIST, gzip-compressed
// or raw. Every defect is reported as a DataError naming the byte offset.
//
//   IdxArray a = read_idx("/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz");
//   // a.type == 0x08, a.dims == {10000}, a.bytes.size() == 10000
//
// Layout: bytes 0,1 are zero; byte 2 is the element type; byte 3 the number of
// dimensions (1..4); then one big-endian uint32 per dimension; then the data,
// row-major, and nothing after it. Offsets are counted in the decompressed stream.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "nn/errors.hpp"

namespace dnnlab::data {

// The one element type dnnlab reads; the others (0x09 sbyte, 0x0B int16,
// 0x0C int32, 0x0D float32, 0x0E float64) are rejected with their name.
inline constexpr uint8_t kIdxUbyte = 0x08;

struct IdxArray {
  uint8_t type = 0;
  std::vector<int64_t> dims;
  std::vector<uint8_t> bytes;  // the data, without the header
};

// Reads path, decompressing when it is gzip (by content; a name ending in .gz
// must hold gzip). Throws DataError: offset -1 and "no such file" when path is
// missing; the offset of the bad header byte; for short data, the offset where
// the data ended; for trailing bytes, the offset where they begin; for a corrupt
// gzip stream, the number of bytes decompressed before the damage.
IdxArray read_idx(const std::string& path);

}  // namespace dnnlab::data
