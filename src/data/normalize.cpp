// The normalization table (see normalize.hpp).
#include "data/normalize.hpp"

namespace dnnlab::data {

std::vector<float> normalization_lut(float scale, float bias) {
  std::vector<float> lut(256);
  for (int v = 0; v < 256; ++v) lut[v] = static_cast<float>(v) * scale + bias;
  return lut;
}

void normalize_bytes(const uint8_t* in, int64_t n, const float* lut, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = lut[in[i]];
}

}  // namespace dnnlab::data
