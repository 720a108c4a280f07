// safetensors files (weights, browser data shards): parsed and checked, or a
// DataError; every tensor a parse accepts lies inside the input.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "nn/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  try {
    dnnlab::nn::SafetensorsFile f = dnnlab::nn::read_safetensors(bytes, "f.safetensors");
    for (const auto& [name, t] : f.tensors) {
      (void)name;
      volatile char sink = 0;
      for (char c : t.data) sink ^= c;  // ASan: the view must be readable
    }
  } catch (const dnnlab::DataError&) {
  }
  return 0;
}
