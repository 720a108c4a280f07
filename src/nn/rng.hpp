// Seeded random numbers that give the same sequence on every platform and
// compiler (std:: distributions do not): xoshiro256** seeded by splitmix64.
#pragma once
#include <cmath>
#include <cstdint>

namespace dnnlab::nn {

inline uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Derives an independent seed from a seed and a tag (layer index, epoch, ...).
inline uint64_t derive_seed(uint64_t seed, uint64_t tag) {
  uint64_t s = seed ^ (tag * 0xD1342543DE82EF95ull + 0x2545F4914F6CDD1Dull);
  splitmix64(s);
  return splitmix64(s);
}

class Rng {
 public:
  explicit Rng(uint64_t seed = 0) { reseed(seed); }
  void reseed(uint64_t seed) {
    uint64_t s = seed;
    for (auto& x : s_) x = splitmix64(s);
    has_spare_ = false;
  }
  uint64_t next_u64() {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }
  // Uniform in [0, 1) with 24 random bits.
  float uniform() { return static_cast<float>(next_u64() >> 40) * 0x1.0p-24f; }
  // Uniform integer in [0, n), n > 0 (Lemire's multiply-shift, tiny bias only for huge n).
  uint64_t below(uint64_t n) {
    return static_cast<uint64_t>((static_cast<unsigned __int128>(next_u64()) * n) >> 64);
  }
  // Standard normal by Box-Muller in double precision.
  float normal() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    double u1 = (static_cast<double>(next_u64() >> 11) + 1.0) * 0x1.0p-53;  // (0, 1]
    double u2 = static_cast<double>(next_u64() >> 11) * 0x1.0p-53;
    double r = std::sqrt(-2.0 * std::log(u1));
    double a = 6.283185307179586 * u2;
    spare_ = static_cast<float>(r * std::sin(a));
    has_spare_ = true;
    return static_cast<float>(r * std::cos(a));
  }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
  float spare_ = 0.f;
  bool has_spare_ = false;
};

}  // namespace dnnlab::nn
