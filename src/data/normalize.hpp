// Pixel normalization through a 256-entry table: x = lut[byte]. Native code
// and the browser core both normalize this way, so a browser trains on
// bit-identical inputs. Standard library only (also built with em++).
//
//   std::vector<float> lut = data::normalization_lut(1.0f / 255, 0);  // "unit"
//   data::normalize_bytes(pixels, n, lut.data(), out);                  // out[i] = lut[pixels[i]]
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace dnnlab::data {

// lut[v] = float(v) * scale + bias, for v in 0..255.
std::vector<float> normalization_lut(float scale, float bias);

// The table for bytes with this histogram (the train split's): "standard"
// gives (x/255 - mean) / std with exact statistics (a constant image is only
// centred), anything else x/255 ("unit").
std::vector<float> byte_lut(const std::array<int64_t, 256>& histogram,
                            const std::string& normalize);

// out[i] = lut[in[i]] for i < n.
void normalize_bytes(const uint8_t* in, int64_t n, const float* lut, float* out);

}  // namespace dnnlab::data
