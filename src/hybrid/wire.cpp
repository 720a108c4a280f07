// Frame codec: see wire.hpp for the layout.
#include "hybrid/wire.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <iterator>
#include <limits>

namespace dnnlab::hybrid {

static_assert(std::endian::native == std::endian::little,
              "the frame codec copies float32 and integers as little-endian bytes");

namespace {

constexpr char kMagic[4] = {'D', 'N', 'H', 'F'};

// What each kind may carry, indexed by kind - 1.
struct KindRule {
  FrameKind kind;
  const char* name;
  bool indices;           // must carry indices (else must not)
  uint32_t min_t, max_t;  // tensor count range
};
constexpr KindRule kKindRules[] = {
    {FrameKind::kTicket, "ticket", true, 0, 0},
    {FrameKind::kWeights, "weights", false, 1, kMaxTensors},
    {FrameKind::kActivations, "activations", false, 1, 1},
    {FrameKind::kActivationGrads, "activation gradients", false, 1, 1},
    {FrameKind::kWeightGrads, "weight gradients", false, 1, kMaxTensors},
    {FrameKind::kBye, "bye", false, 0, 0},
};
static_assert(std::size(kKindRules) == kFrameKinds, "a rule for every frame kind");
constexpr bool rules_in_kind_order() {
  for (int i = 0; i < kFrameKinds; ++i)
    if (static_cast<int>(kKindRules[i].kind) != i + 1) return false;
  return true;
}
static_assert(rules_in_kind_order(), "kKindRules[i] describes kind i + 1");

// std::bit_cast is missing from the libc++ that Debian's em++ ships.
uint32_t float_bits(float v) {
  uint32_t b;
  std::memcpy(&b, &v, 4);
  return b;
}
float bits_float(uint32_t b) {
  float v;
  std::memcpy(&v, &b, 4);
  return v;
}

const KindRule& rule_of(FrameKind k) {
  return kKindRules[static_cast<uint8_t>(k) - 1];
}

template <typename T>
void put(Bytes& out, T v) {
  const size_t at = out.size();
  out.resize(at + sizeof(T));
  std::memcpy(out.data() + at, &v, sizeof(T));
}

// The kinds that may travel in float16 or int8: the per-batch tensors (and
// the ticket that asks for them). Weights and weight gradients are summed
// into the model over many steps; they stay float32.
bool batch_dtype_allowed(FrameKind k) {
  return k == FrameKind::kTicket || k == FrameKind::kActivations ||
         k == FrameKind::kActivationGrads;
}

// int8 cannot carry a non-finite value: such a frame goes in float32.
Dtype dtype_for(Dtype asked, std::span<const nn::TensorView> tensors) {
  if (asked != Dtype::kInt8) return asked;
  for (const auto& t : tensors)
    for (int64_t i = 0, n = t.numel(); i < n; ++i)
      if (!std::isfinite(t.data()[i])) return Dtype::kFloat32;
  return asked;
}

// The kinds a client answers with carry its compute time.
bool carries_compute(FrameKind kind) {
  return kind == FrameKind::kActivations || kind == FrameKind::kWeightGrads;
}

void put_header(Bytes& out, FrameKind kind, Dtype dtype, bool feedback, uint64_t version,
                uint64_t ticket, uint32_t n_indices, uint32_t n_tensors, uint32_t compute_us) {
  if (dtype != Dtype::kFloat32 && !batch_dtype_allowed(kind))
    throw std::invalid_argument(std::string("encode: a ") +
                                kKindRules[static_cast<int>(kind) - 1].name +
                                " frame travels in float32");
  if (feedback && !(kind == FrameKind::kTicket && dtype == Dtype::kInt8))
    throw std::invalid_argument("encode: error feedback is asked for in int8 tickets only");
  if (compute_us != 0 && !carries_compute(kind))
    throw std::invalid_argument(std::string("encode: a ") +
                                kKindRules[static_cast<int>(kind) - 1].name +
                                " frame carries no compute time");
  out.insert(out.end(), kMagic, kMagic + 4);
  out.push_back(kFrameFormat);
  out.push_back(static_cast<uint8_t>(kind));
  out.push_back(static_cast<uint8_t>(dtype));
  out.push_back(feedback ? 1 : 0);
  put(out, version);
  put(out, ticket);
  put(out, n_indices);
  put(out, n_tensors);
  put(out, compute_us);
}

// x / s in double: a float quotient's rounding could move a value across a
// rounding boundary (an error past half a step).
int8_t quantise(float x, float s) {
  if (s == 0) return 0;
  const double q = std::nearbyint(static_cast<double>(x) / s);
  return static_cast<int8_t>(std::clamp(q, -127.0, 127.0));
}

void put_tensor(Bytes& out, const nn::TensorView& t, Dtype dtype) {
  const nn::Shape& s = t.shape();
  if (s.rank < 1) throw std::invalid_argument("encode: a tensor without dimensions");
  put(out, static_cast<uint32_t>(s.rank));
  for (int i = 0; i < s.rank; ++i) put(out, static_cast<uint32_t>(s[i]));
  const size_t at = out.size(), count = static_cast<size_t>(t.numel());
  if (dtype == Dtype::kFloat32) {  // appended: one copy, no zeroing first
    const auto* p = reinterpret_cast<const uint8_t*>(t.data());
    out.insert(out.end(), p, p + 4 * count);
    return;
  }
  out.resize(at + static_cast<size_t>(value_bytes(dtype, t.numel())));
  if (dtype == Dtype::kFloat16) {
    for (size_t i = 0; i < count; ++i) {
      const uint16_t h = to_half(t.data()[i]);
      std::memcpy(out.data() + at + 2 * i, &h, 2);
    }
  } else if (dtype == Dtype::kInt8) {
    const size_t blocks = (count + kInt8Block - 1) / kInt8Block;
    uint8_t* q = out.data() + at + 4 * blocks;
    for (size_t b = 0; b < blocks; ++b) {
      const size_t lo = b * kInt8Block, n = std::min<size_t>(kInt8Block, count - lo);
      const float sc = int8_scale({t.data() + lo, n});
      std::memcpy(out.data() + at + 4 * b, &sc, 4);
      for (size_t i = lo; i < lo + n; ++i) q[i] = static_cast<uint8_t>(quantise(t.data()[i], sc));
    }
  }
}

// Reads fields in order, each bounds-checked against what is left.
class Reader {
 public:
  explicit Reader(std::span<const uint8_t> b) : b_(b) {}
  size_t at() const { return at_; }
  size_t left() const { return b_.size() - at_; }
  template <typename T>
  T get(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, b_.data() + at_, sizeof(T));
    at_ += sizeof(T);
    return v;
  }
  void need(size_t n, const char* what) const {
    if (left() < n)
      throw FrameError(at_, std::string("truncated: ") + what + " needs " + std::to_string(n) +
                                " bytes, " + std::to_string(left()) + " left");
  }
  void copy(void* dst, size_t n, const char* what) {
    need(n, what);
    if (n) std::memcpy(dst, b_.data() + at_, n);
    at_ += n;
  }

 private:
  std::span<const uint8_t> b_;
  size_t at_ = 0;
};

// An int8 tensor's scales, then its values (their bytes are there: checked
// by the caller). Every scale finite, not negative, with 127 x scale finite;
// no value -128.
void read_int8(Reader& r, uint32_t t, nn::Tensor& v) {
  const int64_t count = v.numel(), blocks = (count + kInt8Block - 1) / kInt8Block;
  std::vector<float> scales(static_cast<size_t>(blocks));
  for (int64_t b = 0; b < blocks; ++b) {
    const size_t at = r.at();
    const float s = r.get<float>("an int8 scale");
    const char* bad = !std::isfinite(s)           ? "is not finite"
                      : std::signbit(s)           ? "is negative"
                      : !std::isfinite(s * 127.f) ? "is too large (127 x scale is not finite)"
                                                  : nullptr;
    if (bad)
      throw FrameError(at, "tensor " + std::to_string(t) + ": the scale of block " +
                               std::to_string(b) + " " + bad);
    scales[static_cast<size_t>(b)] = s;
  }
  for (int64_t i = 0; i < count; ++i) {
    const size_t at = r.at();
    const int8_t q = r.get<int8_t>("an int8 value");
    if (q == -128)
      throw FrameError(at, "tensor " + std::to_string(t) + ": int8 value -128 (-127 to 127)");
    v.data()[i] = static_cast<float>(q) * scales[static_cast<size_t>(i / kInt8Block)];
  }
}

}  // namespace

uint16_t to_half(float v) {
  const uint32_t x = float_bits(v);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) {  // NaN: its payload's top bits (a half's own NaN comes back as it was)
    const uint32_t m = (abs >> 13) & 0x3ffu;
    return static_cast<uint16_t>(sign | 0x7c00u | (m ? m : 0x200u));
  }
  if (abs == 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00u);  // infinity stays one
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7bffu);  // >= 65520: saturate
  if (abs < 0x38800000u) {               // below the smallest normal half: a subnormal (or 0)
    if (abs < 0x33000000u) return sign;  // rounds to 0 (below half the smallest subnormal)
    const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    const int shift = 126 - static_cast<int>(abs >> 23);  // 14 .. 24
    const uint32_t q = mant >> shift, rest = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
    const uint32_t r = q + (rest > half || (rest == half && (q & 1)));
    return static_cast<uint16_t>(sign | r);
  }
  // Normal: rebias the exponent, round the 13 dropped bits to nearest even;
  // a carry into the exponent is the right result (up to 65504 by the check above).
  const uint32_t m = abs - 0x38000000u;
  const uint32_t q = m >> 13, rest = m & 0x1fffu;
  const uint32_t r = q + (rest > 0x1000u || (rest == 0x1000u && (q & 1)));
  return static_cast<uint16_t>(sign | std::min<uint32_t>(r, 0x7bffu));
}

float from_half(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0) {  // zero or subnormal: mant x 2^-24
    const float v = static_cast<float>(mant) * 5.9604644775390625e-8f;
    return bits_float(float_bits(v) | sign);
  }
  if (exp == 31) return bits_float(sign | 0x7f800000u | (mant << 13));
  return bits_float(sign | ((exp + 112) << 23) | (mant << 13));
}

const char* dtype_name(Dtype d) {
  switch (d) {
    case Dtype::kFloat32:
      return "float32";
    case Dtype::kFloat16:
      return "float16";
    case Dtype::kInt8:
      return "int8";
  }
  return "?";
}

int64_t value_bytes(Dtype d, int64_t n) {
  switch (d) {
    case Dtype::kFloat16:
      return 2 * n;
    case Dtype::kInt8:
      return n + 4 * ((n + kInt8Block - 1) / kInt8Block);
    default:
      return 4 * n;
  }
}

float int8_scale(std::span<const float> block) {
  float m = 0;
  for (float x : block) m = std::max(m, std::fabs(x));
  if (m == 0) return 0;
  constexpr float kInf = std::numeric_limits<float>::infinity();
  float s = m / 127.f;  // may underflow to 0 or round either way
  while (!std::isfinite(s * 127.f)) s = std::nextafter(s, 0.f);
  while (s * 127.f < m) {
    const float up = std::nextafter(s, kInf);
    if (!std::isfinite(up * 127.f)) break;
    s = up;
  }
  return s;
}

bool wire_round(std::span<float> v, Dtype dtype) {
  if (dtype == Dtype::kFloat16) {
    for (float& x : v) x = from_half(to_half(x));
  } else if (dtype == Dtype::kInt8) {
    for (float x : v)
      if (!std::isfinite(x)) return false;
    for (size_t lo = 0; lo < v.size(); lo += kInt8Block) {
      const std::span<float> b = v.subspan(lo, std::min<size_t>(kInt8Block, v.size() - lo));
      const float s = int8_scale(b);
      for (float& x : b) x = static_cast<float>(quantise(x, s)) * s;
    }
  }
  return true;
}

std::vector<float> int8_block_scales(nn::TensorView v) {
  std::vector<float> out;
  for (int64_t lo = 0, n = v.numel(); lo < n; lo += kInt8Block) {
    float m = 0;
    for (int64_t i = lo; i < std::min(n, lo + kInt8Block); ++i) m = std::max(m, std::fabs(v[i]));
    out.push_back(m / 127.f);
  }
  return out;
}

uint32_t compute_micros(double seconds) {
  if (!(seconds > 0)) return 0;  // NaN too
  const double us = std::nearbyint(seconds * 1e6);
  return us >= 4294967295.0 ? UINT32_MAX : static_cast<uint32_t>(us);
}

const char* frame_kind_name(FrameKind k) {
  const auto i = static_cast<uint8_t>(k);
  return i >= 1 && i <= kFrameKinds ? kKindRules[i - 1].name : "?";
}

namespace {

// The frame's size: reserved before writing it, so that it is allocated once.
size_t frame_bytes(Dtype dtype, size_t n_indices, std::span<const nn::TensorView> tensors) {
  size_t bytes = kFrameHeaderBytes + 4 * n_indices;
  for (const auto& t : tensors)
    bytes += 4 + 4 * static_cast<size_t>(t.shape().rank) +
             static_cast<size_t>(value_bytes(dtype, t.numel()));
  return bytes;
}

}  // namespace

Bytes encode_views(FrameKind kind, uint64_t version, uint64_t ticket,
                   std::span<const nn::TensorView> tensors, Dtype dtype) {
  Bytes out;
  dtype = dtype_for(dtype, tensors);
  out.reserve(frame_bytes(dtype, 0, tensors));
  put_header(out, kind, dtype, false, version, ticket, 0, static_cast<uint32_t>(tensors.size()), 0);
  for (const auto& t : tensors) put_tensor(out, t, dtype);
  return out;
}

Bytes encode(const Frame& f) {
  Bytes out;
  std::vector<nn::TensorView> views;
  for (const auto& t : f.tensors) views.push_back(t.view());
  const Dtype dtype = dtype_for(f.dtype, views);
  out.reserve(frame_bytes(dtype, f.indices.size(), views));
  put_header(out, f.kind, dtype, f.feedback, f.version, f.ticket,
             static_cast<uint32_t>(f.indices.size()), static_cast<uint32_t>(f.tensors.size()),
             f.compute_us);
  for (uint32_t i : f.indices) put(out, i);
  for (const auto& t : views) put_tensor(out, t, dtype);
  return out;
}

Frame decode(std::span<const uint8_t> bytes) {
  Reader r(bytes);
  char magic[4];
  r.copy(magic, 4, "the magic");
  if (std::memcmp(magic, kMagic, 4) != 0) throw FrameError(0, "not a hybrid frame (magic)");
  const uint8_t format = r.get<uint8_t>("the format version");
  if (format != kFrameFormat)
    throw FrameError(4, "format version " + std::to_string(format) + ", this build reads " +
                            std::to_string(kFrameFormat));
  const uint8_t kind = r.get<uint8_t>("the kind");
  if (kind < 1 || kind > kFrameKinds)
    throw FrameError(5, "unknown frame kind " + std::to_string(kind));
  const uint8_t dtype = r.get<uint8_t>("the dtype");
  if (dtype >= kDtypes)
    throw FrameError(6, "dtype " + std::to_string(dtype) + " (0 float32, 1 float16, 2 int8)");
  if (dtype != 0 && !batch_dtype_allowed(static_cast<FrameKind>(kind)))
    throw FrameError(6, "dtype " + std::to_string(dtype) + " (" +
                            dtype_name(static_cast<Dtype>(dtype)) + ") for a " +
                            kKindRules[kind - 1].name + " frame, which travels in float32");
  const uint8_t flags = r.get<uint8_t>("the flags");
  const bool int8_ticket = kind == static_cast<uint8_t>(FrameKind::kTicket) && dtype == 2;
  if (flags > (int8_ticket ? 1 : 0))
    throw FrameError(7, "flags " + std::to_string(flags) + " (" +
                            (int8_ticket ? "an int8 ticket may set bit 0 only" : "must be 0") +
                            ")");
  Frame f;
  f.feedback = flags == 1;
  f.kind = static_cast<FrameKind>(kind);
  f.dtype = static_cast<Dtype>(dtype);
  f.version = r.get<uint64_t>("the model version");
  f.ticket = r.get<uint64_t>("the ticket id");
  const uint32_t n_indices = r.get<uint32_t>("the index count");
  const uint32_t n_tensors = r.get<uint32_t>("the tensor count");
  f.compute_us = r.get<uint32_t>("the compute time");
  const KindRule& rule = rule_of(f.kind);
  const std::string kname = frame_kind_name(f.kind);
  if (rule.indices ? (n_indices == 0 || n_indices > kMaxIndices) : n_indices != 0)
    throw FrameError(
        24, "index count " + std::to_string(n_indices) + " for a " + kname + " frame (" +
                (rule.indices ? "1 to " + std::to_string(kMaxIndices) : "must be 0") + ")");
  if (n_tensors < rule.min_t || n_tensors > rule.max_t)
    throw FrameError(28, "tensor count " + std::to_string(n_tensors) + " for a " + kname +
                             " frame (" + std::to_string(rule.min_t) + " to " +
                             std::to_string(rule.max_t) + ")");
  if (f.compute_us != 0 && !carries_compute(f.kind))
    throw FrameError(32, "compute time " + std::to_string(f.compute_us) + " in a " + kname +
                             " frame (must be 0)");
  if ((f.kind == FrameKind::kWeights || f.kind == FrameKind::kBye) && f.ticket != 0)
    throw FrameError(16, "a " + kname + " frame carries ticket 0");
  if (f.kind != FrameKind::kWeights && f.kind != FrameKind::kBye && f.ticket == 0)
    throw FrameError(16, "ticket id 0 in a " + kname + " frame");
  r.need(size_t{4} * n_indices, "the indices");
  f.indices.resize(n_indices);
  r.copy(f.indices.data(), size_t{4} * n_indices, "the indices");
  f.tensors.reserve(n_tensors);
  for (uint32_t t = 0; t < n_tensors; ++t) {
    const size_t at = r.at();
    const uint32_t rank = r.get<uint32_t>("a tensor's rank");
    if (rank < 1 || rank > static_cast<uint32_t>(nn::kMaxRank))
      throw FrameError(at, "tensor " + std::to_string(t) + ": rank " + std::to_string(rank) +
                               " (1 to " + std::to_string(nn::kMaxRank) + ")");
    nn::Shape s;
    int64_t numel = 1;
    for (uint32_t d = 0; d < rank; ++d) {
      const size_t dat = r.at();
      const uint32_t dim = r.get<uint32_t>("a tensor's dimension");
      if (dim == 0) throw FrameError(dat, "tensor " + std::to_string(t) + ": a dimension of 0");
      numel *= dim;
      if (numel > kMaxTensorValues)
        throw FrameError(dat, "tensor " + std::to_string(t) + ": more than " +
                                  std::to_string(kMaxTensorValues) + " values");
      s.d[s.rank++] = dim;
    }
    const size_t n = static_cast<size_t>(value_bytes(f.dtype, numel));
    r.need(n, "a tensor's values");               // before allocating
    nn::Tensor v = nn::Tensor::uninitialized(s);  // every value is written below
    if (f.dtype == Dtype::kInt8) {
      read_int8(r, t, v);
    } else if (f.dtype == Dtype::kFloat16) {
      std::vector<uint16_t> half(static_cast<size_t>(numel));
      r.copy(half.data(), n, "a tensor's values");
      for (int64_t i = 0; i < numel; ++i) v.data()[i] = from_half(half[i]);
    } else {
      r.copy(v.data(), n, "a tensor's values");
    }
    f.tensors.push_back(std::move(v));
  }
  if (r.left() != 0)
    throw FrameError(r.at(), std::to_string(r.left()) + " bytes after the last tensor");
  return f;
}

}  // namespace dnnlab::hybrid
