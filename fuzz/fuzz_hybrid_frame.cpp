// Hybrid trainer frames (src/hybrid/wire.hpp): decoded, or a FrameError
// whose offset lies within the input; a decoded frame encodes back to the
// same bytes.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "hybrid/wire.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> bytes(data, size);
  try {
    const dnnlab::hybrid::Frame f = dnnlab::hybrid::decode(bytes);
    const dnnlab::hybrid::Bytes again = dnnlab::hybrid::encode(f);
    if (again.size() != size || !std::equal(again.begin(), again.end(), data)) std::abort();
  } catch (const dnnlab::hybrid::FrameError& e) {
    if (e.offset() > size) std::abort();
  }
  return 0;
}
