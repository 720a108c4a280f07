// NumPy arrays: the first byte chooses .npy (even) or .npz (odd), the rest
// is the file. An array (or archive of them) or a DataError, never a crash;
// zip_extract's sizes and CRC are checked on whatever the directory claims.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "data/npy.hpp"

namespace {
void check(const dnnlab::data::NpyArray& a) {
  if (static_cast<int64_t>(a.data.size()) != a.count() * a.item_size) __builtin_trap();
  for (int64_t i = 0; i < a.count() && i < 64; ++i) (void)a.value(i);
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view bytes(reinterpret_cast<const char*>(data + 1), size - 1);
  try {
    if (data[0] & 1) {
      for (const dnnlab::data::NamedArray& a : dnnlab::data::read_npz(bytes, "fuzz.npz"))
        check(a.array);
    } else {
      check(dnnlab::data::parse_npy(bytes, "fuzz.npy"));
    }
  } catch (const dnnlab::DataError&) {
  }
  return 0;
}
