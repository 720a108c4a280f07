// The frame codec: round trips, and strict decoding that names the offset.
#include "hybrid/wire.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

namespace dnnlab::hybrid {
namespace wire_test {

Frame sample_frame() {
  Frame f{FrameKind::kWeightGrads, 7, 42, {}, {}};
  f.tensors.emplace_back(nn::Shape{2, 3});
  f.tensors.emplace_back(nn::Shape{4});
  for (int i = 0; i < 6; ++i) f.tensors[0][i] = 0.5f * i - 1;
  for (int i = 0; i < 4; ++i) f.tensors[1][i] = -3.25f * i;
  return f;
}

size_t error_offset(const Bytes& b, std::string* message = nullptr) {
  try {
    decode(b);
  } catch (const FrameError& e) {
    if (message) *message = e.what();
    return e.offset();
  }
  ADD_FAILURE() << "decoded without an error";
  return ~size_t{0};
}

TEST(HybridWire, RoundTripKeepsEveryField) {
  const Frame f = sample_frame();
  const Bytes b = encode(f);
  EXPECT_EQ(b.size(), kFrameHeaderBytes + (4 + 8 + 24) + (4 + 4 + 16));
  const Frame g = decode(b);
  EXPECT_EQ(g.kind, f.kind);
  EXPECT_EQ(g.version, 7u);
  EXPECT_EQ(g.ticket, 42u);
  ASSERT_EQ(g.tensors.size(), 2u);
  EXPECT_EQ(g.tensors[0].shape(), (nn::Shape{2, 3}));
  EXPECT_EQ(g.tensors[1].shape(), (nn::Shape{4}));
  EXPECT_EQ(std::memcmp(g.tensors[0].data(), f.tensors[0].data(), 24), 0);
  EXPECT_EQ(std::memcmp(g.tensors[1].data(), f.tensors[1].data(), 16), 0);
  std::vector<nn::TensorView> views{f.tensors[0].view(), f.tensors[1].view()};
  EXPECT_EQ(encode_views(f.kind, 7, 42, views), b);
}

// A client's answers carry its compute time; the server's frames carry 0,
// and a decoder refuses anything else there (named at byte 32).
TEST(HybridWire, OnlyAnswersCarryAComputeTime) {
  Frame f = sample_frame();  // weight gradients
  f.compute_us = 123456;
  EXPECT_EQ(decode(encode(f)).compute_us, 123456u);
  Frame a{FrameKind::kActivations, 1, 1, {}, {}};
  a.tensors.emplace_back(nn::Shape{1});
  a.compute_us = UINT32_MAX;
  EXPECT_EQ(decode(encode(a)).compute_us, UINT32_MAX);
  Frame t{FrameKind::kTicket, 3, 9, {1}, {}};
  EXPECT_EQ(decode(encode(t)).compute_us, 0u);
  t.compute_us = 1;
  EXPECT_THROW(encode(t), std::invalid_argument);
  t.compute_us = 0;
  Bytes b = encode(t);
  b[32] = 1;
  std::string msg;
  EXPECT_EQ(error_offset(b, &msg), 32u);
  EXPECT_NE(msg.find("compute time"), std::string::npos) << msg;
  EXPECT_EQ(compute_micros(-1), 0u);
  EXPECT_EQ(compute_micros(std::nan("")), 0u);
  EXPECT_EQ(compute_micros(0.0000014), 1u);
  EXPECT_EQ(compute_micros(1e9), UINT32_MAX);
}

TEST(HybridWire, TicketCarriesIndices) {
  Frame t{FrameKind::kTicket, 3, 9, {5, 0, 4000000000u}, {}};
  const Frame g = decode(encode(t));
  EXPECT_EQ(g.indices, t.indices);
  EXPECT_TRUE(g.tensors.empty());
}

TEST(HybridWire, EveryTruncationIsAnErrorWithinTheFrame) {
  const Bytes b = encode(sample_frame());
  for (size_t n = 0; n < b.size(); ++n) {
    const Bytes cut(b.begin(), b.begin() + static_cast<std::ptrdiff_t>(n));
    EXPECT_LE(error_offset(cut), n) << "prefix of " << n;
  }
}

TEST(HybridWire, ErrorsNameTheOffset) {
  const Bytes good = encode(sample_frame());
  auto with = [&](size_t at, uint8_t v) {
    Bytes b = good;
    b[at] = v;
    return b;
  };
  std::string msg;
  EXPECT_EQ(error_offset(with(0, 'X'), &msg), 0u);
  EXPECT_NE(msg.find("magic"), std::string::npos) << msg;
  EXPECT_EQ(error_offset(with(4, 1)), 4u);        // format version 1 (no compute time)
  EXPECT_EQ(error_offset(with(5, 0)), 5u);        // kind
  EXPECT_EQ(error_offset(with(5, 99)), 5u);       // kind
  EXPECT_EQ(error_offset(with(6, 1), &msg), 6u);  // dtype: gradients travel in float32
  EXPECT_NE(msg.find("float32"), std::string::npos) << msg;
  EXPECT_EQ(error_offset(with(7, 1)), 7u);    // reserved
  EXPECT_EQ(error_offset(with(24, 1)), 24u);  // weight gradients carry no indices
  EXPECT_EQ(error_offset(with(28, 0)), 28u);  // ... and at least one tensor
  EXPECT_EQ(error_offset(with(36, 9)), 36u);  // rank 9
  EXPECT_EQ(error_offset(with(40, 0)), 40u);  // a dimension of 0
  Bytes trailing = good;
  trailing.push_back(0);
  EXPECT_EQ(error_offset(trailing, &msg), good.size());
  EXPECT_NE(msg.find("after the last tensor"), std::string::npos) << msg;
  // Activations: exactly one tensor.
  Frame two{FrameKind::kActivations, 1, 1, {}, {}};
  two.tensors.emplace_back(nn::Shape{1});
  two.tensors.emplace_back(nn::Shape{1});
  EXPECT_EQ(error_offset(encode(two)), 28u);
  // Ticket 0 is never issued.
  Frame zero{FrameKind::kActivations, 1, 0, {}, {}};
  zero.tensors.emplace_back(nn::Shape{1});
  EXPECT_EQ(error_offset(encode(zero)), 16u);
}

// Every half value survives float32 and back; every float rounds to the
// nearest half (ties to even), saturating at 65504 but keeping infinities.
TEST(HybridWire, HalfConversionIsExactAndRoundsToNearest) {
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    const float f = from_half(static_cast<uint16_t>(h));
    ASSERT_EQ(to_half(f), h) << "half 0x" << std::hex << h;  // NaN payloads too (the fuzzer's rule)
  }
  EXPECT_EQ(from_half(to_half(1.0f)), 1.0f);
  EXPECT_EQ(from_half(to_half(-3.25f)), -3.25f);
  EXPECT_EQ(from_half(to_half(65504.0f)), 65504.0f);
  EXPECT_EQ(from_half(to_half(1e6f)), 65504.0f);  // saturates, stays finite
  EXPECT_EQ(from_half(to_half(-70000.0f)), -65504.0f);
  EXPECT_TRUE(std::isinf(from_half(to_half(INFINITY))));
  EXPECT_TRUE(std::isnan(from_half(to_half(std::nanf("")))));
  EXPECT_EQ(from_half(to_half(5.9604645e-8f)), 5.9604645e-8f);  // the smallest subnormal
  EXPECT_EQ(from_half(to_half(2.9802322e-8f)), 0.0f);           // half of it: ties to even (0)
  EXPECT_EQ(from_half(to_half(1.0f + 1.0f / 2048)), 1.0f);      // tie between 1 and 1+2^-10: even
  EXPECT_EQ(from_half(to_half(1.0f + 3.0f / 2048)), 1.0f + 2.0f / 1024);
  // Nearest: no neighbouring half is closer, over many magnitudes.
  uint32_t x = 12345;
  for (int i = 0; i < 200000; ++i) {
    x = x * 1664525u + 1013904223u;
    const float v =
        std::ldexp(static_cast<float>(x >> 8) / (1 << 24), (i % 40) - 26) * (i % 2 ? 1.f : -1.f);
    const uint16_t h = to_half(v);
    const double err = std::fabs(static_cast<double>(from_half(h)) - v);
    for (int d : {-1, 1}) {
      const uint16_t n = static_cast<uint16_t>(h + d);
      if ((n & 0x7c00u) == 0x7c00u || (n ^ h) & 0x8000u) continue;  // inf/NaN or another sign
      ASSERT_LE(err, std::fabs(static_cast<double>(from_half(n)) - v)) << v;
    }
  }
}

TEST(HybridWire, HalfFramesCarryTwoBytesPerValueAndOnlyForBatchTensors) {
  Frame f{FrameKind::kActivations, 2, 5, {}, {}, Dtype::kFloat16};
  f.tensors.emplace_back(nn::Shape{2, 3});
  for (int i = 0; i < 6; ++i) f.tensors[0][i] = 0.25f * i - 0.5f;
  const Bytes b = encode(f);
  EXPECT_EQ(b.size(), kFrameHeaderBytes + 4 + 8 + 2 * 6);
  EXPECT_EQ(b[6], 1);
  const Frame g = decode(b);
  EXPECT_EQ(g.dtype, Dtype::kFloat16);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(g.tensors[0][i], f.tensors[0][i]);  // exact in half
  std::vector<nn::TensorView> views{f.tensors[0].view()};
  EXPECT_EQ(encode_views(f.kind, 2, 5, views, Dtype::kFloat16), b);
  // A ticket asks for half answers; it has no values of its own.
  Frame t{FrameKind::kTicket, 3, 9, {1, 2}, {}, Dtype::kFloat16};
  EXPECT_EQ(decode(encode(t)).dtype, Dtype::kFloat16);
  // Weights and weight gradients stay float32, both ways.
  Frame w = sample_frame();
  w.dtype = Dtype::kFloat16;
  EXPECT_THROW(encode(w), std::invalid_argument);
  Bytes wb = encode(sample_frame());
  wb[6] = 1;
  std::string msg;
  EXPECT_EQ(error_offset(wb, &msg), 6u);
  EXPECT_NE(msg.find("weight gradients"), std::string::npos) << msg;
  wb[6] = 2;
  EXPECT_EQ(error_offset(wb, &msg), 6u);
  // A half frame cut inside its values names the values.
  const Bytes cut(b.begin(), b.end() - 1);
  EXPECT_EQ(error_offset(cut, &msg), kFrameHeaderBytes + 12);
  EXPECT_NE(msg.find("values"), std::string::npos) << msg;
}

TEST(HybridWire, HugeDimensionsFailBeforeAllocating) {
  Frame f{FrameKind::kActivations, 1, 1, {}, {}};
  f.tensors.emplace_back(nn::Shape{1});
  Bytes b = encode(f);
  // rank 1 with a dimension of 2^31: the values are not there.
  const uint32_t big = 1u << 31;
  std::memcpy(b.data() + 40, &big, 4);
  std::string msg;
  EXPECT_EQ(error_offset(b, &msg), 40u);
  EXPECT_NE(msg.find("values"), std::string::npos) << msg;
  // Within the bound but truncated: named at the values.
  const uint32_t many = 1000;
  std::memcpy(b.data() + 40, &many, 4);
  EXPECT_EQ(error_offset(b, &msg), 44u);
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
}

}  // namespace wire_test
}  // namespace dnnlab::hybrid
