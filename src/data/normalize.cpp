// The normalization table (see normalize.hpp).
#include "data/normalize.hpp"

#include <cmath>

namespace dnnlab::data {

std::vector<float> normalization_lut(float scale, float bias) {
  std::vector<float> lut(256);
  for (int v = 0; v < 256; ++v) lut[v] = static_cast<float>(v) * scale + bias;
  return lut;
}

std::vector<float> byte_lut(const std::array<int64_t, 256>& hist, const std::string& normalize) {
  float scale = 1.0f / 255.0f, bias = 0.0f;
  if (normalize == "standard") {
    double n = 0;
    for (int64_t c : hist) n += static_cast<double>(c);
    double mean = 0;
    for (int v = 0; v < 256; ++v) mean += static_cast<double>(hist[v]) * (v / 255.0);
    mean /= n;
    double var = 0;
    for (int v = 0; v < 256; ++v) {
      double d = v / 255.0 - mean;
      var += static_cast<double>(hist[v]) * d * d;
    }
    double sd = std::sqrt(var / n);
    if (!(sd > 1e-12)) sd = 1.0;  // constant images: only centre them
    scale = static_cast<float>(1.0 / (255.0 * sd));
    bias = static_cast<float>(-mean / sd);
  }
  return normalization_lut(scale, bias);
}

void normalize_bytes(const uint8_t* in, int64_t n, const float* lut, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = lut[in[i]];
}

}  // namespace dnnlab::data
