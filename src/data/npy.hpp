// NumPy arrays: .npy files, and .npz archives of them (stored or deflated
// zip, see zip.hpp). Parsed from memory; every defect is a DataError naming
// the byte offset (in the .npy, or in the archive member, named
// `archive.npz:x_train.npy`).
//
//   NpyArray a = parse_npy(read_file_bytes("x.npy"), "x.npy");
//   // a.dtype() == "uint8", a.shape == {60000, 28, 28}, a.count() == 47040000
//   std::vector<NamedArray> z = read_npz(read_file_bytes("mnist.npz"), "mnist.npz");
//   // z[0].name == "x_train", ...
//
// Format: the 6 bytes \x93NUMPY, version 1, 2 or 3, a header length (uint16
// in version 1, uint32 after), then a Python dict literal with 'descr'
// (dtype), 'fortran_order' and 'shape', then the data, C order. Element
// types: bool, (u)int8/16/32/64, float32, float64, either byte order.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "nn/errors.hpp"

namespace dnnlab::data {

struct NpyArray {
  char kind = 0;  // 'b' bool, 'i' signed, 'u' unsigned, 'f' float
  int item_size = 0;
  bool big_endian = false;
  std::vector<int64_t> shape;  // () is a scalar: one element
  std::string data;            // count() * item_size bytes, as stored
  int64_t data_offset = 0;     // where the data starts in its file or member

  int64_t count() const;
  std::string dtype() const;      // "uint8", "float32", ...
  std::string shape_str() const;  // "(60000, 28, 28)"
  // Element i as a double (exact for every type but (u)int64 beyond 2^53).
  double value(int64_t i) const;
};

struct NamedArray {
  std::string name;  // the member's name without ".npy"
  NpyArray array;
};

// Throws DataError for a bad magic or version, a header that runs past the
// file or is not the dict above, an unsupported dtype (structured, strings,
// float16, complex, objects), fortran_order True, a negative or too large
// shape, data shorter or longer than the shape needs.
NpyArray parse_npy(std::string_view bytes, const std::string& file);

// Every .npy member of a .npz archive, in the archive's order. Throws
// DataError as read_zip_directory/zip_extract/parse_npy do, and for a member
// whose name does not end in .npy.
std::vector<NamedArray> read_npz(std::string_view archive, const std::string& file);

}  // namespace dnnlab::data
