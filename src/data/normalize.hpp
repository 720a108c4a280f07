// Pixel normalization through a 256-entry table: x = lut[byte]. Native code
// and the browser core both normalize this way, so a browser trains on
// bit-identical inputs. Standard library only (also built with em++).
//
//   std::vector<float> lut = data::normalization_lut(1.0f / 255, 0);  // "unit"
//   data::normalize_bytes(pixels, n, lut.data(), out);                  // out[i] = lut[pixels[i]]
#pragma once
#include <cstdint>
#include <vector>

namespace dnnlab::data {

// lut[v] = float(v) * scale + bias, for v in 0..255.
std::vector<float> normalization_lut(float scale, float bias);

// out[i] = lut[in[i]] for i < n.
void normalize_bytes(const uint8_t* in, int64_t n, const float* lut, float* out);

}  // namespace dnnlab::data
