// int8 frames (wire.hpp): symmetric blocks of kInt8Block values with a
// float32 scale each; the error bound per value, the edge cases, the bytes,
// the strict decoder, and error feedback (feedback.hpp).
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>

#include "hybrid/feedback.hpp"
#include "hybrid/wire.hpp"

namespace dnnlab::hybrid {
namespace wire_int8_test {

Frame activations(nn::Shape s, uint64_t seed, float magnitude = 1) {
  Frame f{FrameKind::kActivations, 3, 8, {}, {}, Dtype::kInt8};
  f.tensors.emplace_back(s);
  uint64_t x = seed;
  for (int64_t i = 0; i < s.numel(); ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    const double u = static_cast<double>(x >> 11) / 9007199254740992.0;  // [0, 1)
    // Varied magnitudes within a block: a few large, many small, some zero.
    f.tensors[0][i] =
        static_cast<float>((u - 0.5) * magnitude * (i % 17 == 0 ? 8 : 1) * (i % 5 == 0 ? 0 : 1));
  }
  return f;
}

size_t error_offset(const Bytes& b, std::string* message) {
  try {
    decode(b);
  } catch (const FrameError& e) {
    *message = e.what();
    return e.offset();
  }
  ADD_FAILURE() << "decoded without an error";
  return ~size_t{0};
}

// Every value within half its block's scale plus the float rounding of
// q x s (127 x 2^-24 < 1e-5 of s), the scale max|x| / 127.
void expect_within_bound(const nn::Tensor& sent, const nn::Tensor& got) {
  ASSERT_EQ(sent.numel(), got.numel());
  for (int64_t lo = 0; lo < sent.numel(); lo += kInt8Block) {
    const int64_t n = std::min(kInt8Block, sent.numel() - lo);
    const float s = int8_scale({sent.data() + lo, static_cast<size_t>(n)});
    float m = 0;
    for (int64_t i = lo; i < lo + n; ++i) m = std::max(m, std::fabs(sent.data()[i]));
    EXPECT_GE(127.0 * s, m * (1 - std::ldexp(1.0, -23))) << "block at " << lo;  // float rounding
    EXPECT_LE(127.0 * s, m * (1 + 1e-6) + 127.0 * std::numeric_limits<float>::denorm_min())
        << "block at " << lo;
    for (int64_t i = lo; i < lo + n; ++i) {
      ASSERT_TRUE(std::isfinite(got.data()[i]));
      ASSERT_LE(std::fabs(static_cast<double>(got.data()[i]) - sent.data()[i]), s * (0.5 + 1e-5))
          << "value " << i << " of block scale " << s;
    }
  }
}

TEST(HybridWireInt8, EveryValueIsWithinHalfItsBlockScale) {
  // 1000 values: 7 full blocks and a short one.
  for (float mag : {1e-30f, 1e-3f, 1.f, 3e4f, 1e30f}) {
    const Frame f = activations(nn::Shape{5, 8, 25}, 17, mag);
    const Bytes b = encode(f);
    const Frame g = decode(b);
    EXPECT_EQ(g.dtype, Dtype::kInt8);
    ASSERT_EQ(g.tensors.size(), 1u);
    EXPECT_TRUE(g.tensors[0].shape() == f.tensors[0].shape());
    expect_within_bound(f.tensors[0], g.tensors[0]);
    // wire_round is what the receiver reads, exactly.
    nn::Tensor r = f.tensors[0];
    ASSERT_TRUE(wire_round({r.data(), static_cast<size_t>(r.numel())}, Dtype::kInt8));
    EXPECT_EQ(std::memcmp(r.data(), g.tensors[0].data(), 4 * r.numel()), 0) << mag;
  }
}

TEST(HybridWireInt8, AQuarterOfTheBytesPlusAScalePerBlock) {
  const Frame f = activations(nn::Shape{64, 64, 7, 7}, 1);  // the example CNN's activations
  const int64_t n = 64 * 64 * 7 * 7;
  const Bytes b = encode(f);
  EXPECT_EQ(static_cast<int64_t>(b.size()),
            static_cast<int64_t>(kFrameHeaderBytes) + 4 + 16 + n + 4 * (n / kInt8Block));
  Frame full = f;
  full.dtype = Dtype::kFloat32;
  const double ratio = static_cast<double>(b.size()) / static_cast<double>(encode(full).size());
  EXPECT_GT(ratio, 0.25);
  EXPECT_LT(ratio, 0.26);  // 1 + 4/128 bytes of 4
  EXPECT_EQ(value_bytes(Dtype::kInt8, 1), 5);
  EXPECT_EQ(value_bytes(Dtype::kInt8, 129), 129 + 8);
}

TEST(HybridWireInt8, EdgeCasesZerosOneHugeValueDenormalsBatchOne) {
  // All zeros: scale 0, every value exactly 0.
  Frame z{FrameKind::kActivationGrads, 1, 2, {}, {}, Dtype::kInt8};
  z.tensors.emplace_back(nn::Shape{1, 300});  // batch 1, three blocks
  Frame gz = decode(encode(z));
  for (int64_t i = 0; i < 300; ++i) EXPECT_EQ(gz.tensors[0][i], 0.f);
  EXPECT_EQ(int8_scale({z.tensors[0].data(), 128}), 0.f);
  // One huge value: its block's other values are lost below half the scale,
  // the other blocks keep their own scales.
  Frame h = z;
  for (int64_t i = 0; i < 300; ++i) h.tensors[0][i] = 0.01f * static_cast<float>(i % 9);
  h.tensors[0][3] = FLT_MAX;
  h.tensors[0][200] = -FLT_MAX;
  const Frame gh = decode(encode(h));
  expect_within_bound(h.tensors[0], gh.tensors[0]);
  EXPECT_EQ(gh.tensors[0][3], 127.f * int8_scale({h.tensors[0].data(), 128}));
  EXPECT_TRUE(std::isfinite(gh.tensors[0][3]));
  EXPECT_LT(gh.tensors[0][200], -0.99f * FLT_MAX);
  EXPECT_EQ(gh.tensors[0][4], 0.f);  // 0.01 beside FLT_MAX
  for (int64_t i = 128; i < 256; ++i) {
    if (i != 200) {
      EXPECT_EQ(gh.tensors[0][i], 0.f);
    }
  }
  for (int64_t i = 256; i < 300; ++i)  // the short last block: its own scale
    EXPECT_NEAR(gh.tensors[0][i], h.tensors[0][i], 0.08f / 254 * 1.0001f);
  // Denormals, down to the smallest: the scale is a denormal (not 0) and
  // the bound holds.
  Frame d = z;
  const float tiny = std::numeric_limits<float>::denorm_min();
  for (int64_t i = 0; i < 300; ++i) d.tensors[0][i] = tiny * static_cast<float>(i % 200);
  d.tensors[0][130] = tiny;  // a block whose max is the smallest denormal
  for (int64_t i = 131; i < 256; ++i) d.tensors[0][i] = 0;
  d.tensors[0][128] = d.tensors[0][129] = 0;
  const Frame gd = decode(encode(d));
  expect_within_bound(d.tensors[0], gd.tensors[0]);
  EXPECT_GT(int8_scale({d.tensors[0].data() + 128, 128}), 0.f);
  EXPECT_EQ(gd.tensors[0][130], tiny);
  EXPECT_EQ(gd.tensors[0][127], d.tensors[0][127]);  // 127 denormal steps: exact
  // A one-value tensor: itself, to the float rounding of 127 x s.
  Frame one{FrameKind::kActivations, 1, 2, {}, {}, Dtype::kInt8};
  one.tensors.emplace_back(nn::Shape{1});
  one.tensors[0][0] = -0.7f;
  EXPECT_NEAR(decode(encode(one)).tensors[0][0], -0.7f, 0.7f * 1e-6f);
}

TEST(HybridWireInt8, NonFiniteValuesTravelInFloat32) {
  for (float bad : {std::nanf(""), INFINITY, -INFINITY}) {
    Frame f = activations(nn::Shape{2, 200}, 5);
    f.tensors[0][333] = bad;
    const Bytes b = encode(f);
    EXPECT_EQ(b[6], 0) << "a non-finite value must not be quantised away";
    const Frame g = decode(b);
    EXPECT_EQ(g.dtype, Dtype::kFloat32);
    EXPECT_EQ(std::memcmp(g.tensors[0].data(), f.tensors[0].data(), 4 * 400), 0);
    std::vector<nn::TensorView> views{f.tensors[0].view()};
    EXPECT_EQ(encode_views(f.kind, f.version, f.ticket, views, Dtype::kInt8), b);
    nn::Tensor r = f.tensors[0];
    EXPECT_FALSE(wire_round({r.data(), 400}, Dtype::kInt8));
  }
}

TEST(HybridWireInt8, DecodingIsStrict) {
  Frame f{FrameKind::kActivations, 1, 2, {}, {}, Dtype::kInt8};
  f.tensors.emplace_back(nn::Shape{2, 100});  // two blocks: 128 and 72 values
  for (int64_t i = 0; i < 200; ++i) f.tensors[0][i] = 0.01f * static_cast<float>(i) - 1;
  const Bytes good = encode(f);
  const size_t scales = kFrameHeaderBytes + 4 + 8, values = scales + 8;
  ASSERT_EQ(good.size(), values + 200);
  std::string msg;
  auto with_scale = [&](size_t at, float s) {
    Bytes b = good;
    std::memcpy(b.data() + at, &s, 4);
    return b;
  };
  EXPECT_EQ(error_offset(with_scale(scales + 4, std::nanf("")), &msg), scales + 4);
  EXPECT_NE(msg.find("scale of block 1 is not finite"), std::string::npos) << msg;
  EXPECT_EQ(error_offset(with_scale(scales, INFINITY), &msg), scales);
  EXPECT_EQ(error_offset(with_scale(scales, -0.5f), &msg), scales);
  EXPECT_NE(msg.find("negative"), std::string::npos) << msg;
  EXPECT_EQ(error_offset(with_scale(scales, -0.f), &msg), scales);
  EXPECT_EQ(error_offset(with_scale(scales, FLT_MAX), &msg), scales);
  EXPECT_NE(msg.find("too large"), std::string::npos) << msg;
  Bytes b = good;
  b[values + 150] = 0x80;  // -128
  EXPECT_EQ(error_offset(b, &msg), values + 150);
  EXPECT_NE(msg.find("-128"), std::string::npos) << msg;
  // Lengths: one byte short names the values, one byte more the tail.
  EXPECT_EQ(error_offset(Bytes(good.begin(), good.end() - 1), &msg), values - 8);
  EXPECT_NE(msg.find("values"), std::string::npos) << msg;
  b = good;
  b.push_back(0);
  EXPECT_EQ(error_offset(b, &msg), good.size());
  // Weights and weight gradients stay float32; dtype 3 does not exist.
  b = good;
  b[5] = static_cast<uint8_t>(FrameKind::kWeightGrads);
  EXPECT_EQ(error_offset(b, &msg), 6u);
  EXPECT_NE(msg.find("int8"), std::string::npos) << msg;
  b = good;
  b[6] = 3;
  EXPECT_EQ(error_offset(b, &msg), 6u);
  Frame w{FrameKind::kWeights, 1, 0, {}, {}, Dtype::kInt8};
  w.tensors.emplace_back(nn::Shape{1});
  EXPECT_THROW(encode(w), std::invalid_argument);
}

TEST(HybridWireInt8, TheFeedbackFlagIsForInt8TicketsOnly) {
  Frame t{FrameKind::kTicket, 4, 9, {0, 1}, {}, Dtype::kInt8};
  t.feedback = true;
  const Bytes b = encode(t);
  EXPECT_EQ(b[7], 1);
  EXPECT_TRUE(decode(b).feedback);
  t.feedback = false;
  EXPECT_FALSE(decode(encode(t)).feedback);
  std::string msg;
  Bytes bad = b;
  bad[7] = 2;
  EXPECT_EQ(error_offset(bad, &msg), 7u);
  bad = b;
  bad[6] = 1;  // a float16 ticket with the flag
  EXPECT_EQ(error_offset(bad, &msg), 7u);
  Frame a{FrameKind::kActivations, 1, 2, {}, {}, Dtype::kInt8};
  a.tensors.emplace_back(nn::Shape{1});
  a.feedback = true;
  EXPECT_THROW(encode(a), std::invalid_argument);
  t.dtype = Dtype::kFloat16;
  t.feedback = true;
  EXPECT_THROW(encode(t), std::invalid_argument);
}

// Error feedback: what is sent over a stream of the same tensor sums to
// the true sum within one step's error (the residual telescopes), while
// without it the errors add up.
TEST(HybridWireInt8, ErrorFeedbackCarriesTheResidual) {
  const Frame f = activations(nn::Shape{2, 150}, 9);
  ErrorFeedback fb;
  std::vector<double> sent_sum(300, 0), plain_sum(300, 0);
  nn::Tensor plain = f.tensors[0];
  ASSERT_TRUE(wire_round({plain.data(), 300}, Dtype::kInt8));
  const int steps = 50;
  for (int k = 0; k < steps; ++k) {
    nn::Tensor t = f.tensors[0];
    fb.carry(t, Dtype::kInt8);
    const Frame g = decode(encode(Frame{FrameKind::kActivations, 1, 2, {}, {t}, Dtype::kInt8}));
    for (int i = 0; i < 300; ++i) {
      // The residual is exactly what the receiver did not read.
      ASSERT_EQ(fb.residual().data()[i], t.data()[i] - g.tensors[0][i]);
      sent_sum[i] += g.tensors[0][i];
      plain_sum[i] += plain.data()[i];
    }
  }
  double fed = 0, unfed = 0;
  for (int i = 0; i < 300; ++i) {
    const double want = static_cast<double>(f.tensors[0][i]) * steps;
    fed = std::max(fed, std::fabs(sent_sum[i] - want));
    unfed = std::max(unfed, std::fabs(plain_sum[i] - want));
  }
  const float s = int8_scale({f.tensors[0].data(), 128});
  EXPECT_LE(fed, s);  // one residual, not fifty
  EXPECT_GT(unfed, 10 * s);
  // A shorter tensor takes the first values; a non-finite one clears it.
  nn::Tensor shorter(nn::Shape{1, 150});
  fb.carry(shorter, Dtype::kInt8);
  EXPECT_EQ(fb.residual().numel(), 150);
  nn::Tensor nan(nn::Shape{1, 150});
  nan.data()[7] = std::nanf("");
  fb.carry(nan, Dtype::kInt8);
  EXPECT_EQ(fb.residual().numel(), 0);
}

}  // namespace wire_int8_test
}  // namespace dnnlab::hybrid
