// The hybrid trainer's binary frames: tickets, weights, activations,
// activation gradients and weight gradients, each with the model version and
// the ticket it belongs to. One layout for every transport (in-process
// today, WebSocket later); decoding is strict and never trusts a length.
//
//   hybrid::Frame f{hybrid::FrameKind::kActivations, version, ticket};
//   f.tensors.push_back(std::move(h));                  // [batch, C, H, W], float32
//   hybrid::Bytes b = hybrid::encode(f);
//   hybrid::Frame g = hybrid::decode(b);                 // throws FrameError (byte offset)
//
// Layout (little-endian), docs/distributed.md "Frames":
//   0  magic "DNHF"          4  format version (1)     5  kind
//   6  dtype (0 float32, 1 float16)                   7  reserved (0)
//   8  model version u64    16  ticket id u64
//  24  index count u32      28  tensor count u32
//  32  indices u32 x count, then per tensor: rank u32 (1..4), dims u32 x rank
//      (each >= 1), the values as float32 (or float16) x product(dims).
// float16 (IEEE binary16) is allowed for tickets (answer in float16),
// activations and activation gradients; weights and gradients stay float32.
// Nothing may follow the last tensor.
#pragma once
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "nn/tensor.hpp"

namespace dnnlab::hybrid {

using Bytes = std::vector<uint8_t>;

enum class FrameKind : uint8_t {
  kTicket = 1,           // server -> client: batch indices (no tensors)
  kWeights = 2,          // server -> client: features parameters then state
  kActivations = 3,      // client -> server: one tensor, the features' output
  kActivationGrads = 4,  // server -> client: one tensor, dLoss/d activations
  kWeightGrads = 5,      // client -> server: parameter gradients then state
  kBye = 6,              // either way: the run is over / the client leaves
};
inline constexpr int kFrameKinds = 6;
const char* frame_kind_name(FrameKind k);

inline constexpr uint8_t kFrameFormat = 1;
inline constexpr size_t kFrameHeaderBytes = 32;
// Bounds a frame cannot exceed, whatever its length says.
inline constexpr uint32_t kMaxIndices = 1u << 20;
inline constexpr uint32_t kMaxTensors = 4096;
inline constexpr int64_t kMaxTensorValues = int64_t{1} << 28;

enum class Dtype : uint8_t { kFloat32 = 0, kFloat16 = 1 };

// IEEE binary16 from float32, rounding to nearest even. Finite values past
// the largest half (65504) saturate to it rather than become infinite (a
// large honest activation must not read as a non-finite one); infinities
// and NaN stay what they are.
uint16_t to_half(float v);
float from_half(uint16_t h);

struct Frame {
  FrameKind kind = FrameKind::kBye;
  uint64_t version = 0;  // the features' model version the frame belongs to
  uint64_t ticket = 0;   // 0 for weights and bye
  std::vector<uint32_t> indices;
  std::vector<nn::Tensor> tensors;
  Dtype dtype = Dtype::kFloat32;  // how the tensors travel; decoded, they are float32
};

// A frame that breaks the layout: names the byte offset and what was wrong.
class FrameError : public std::runtime_error {
 public:
  FrameError(size_t offset, const std::string& message)
      : std::runtime_error("hybrid frame at byte " + std::to_string(offset) + ": " + message),
        offset_(offset) {}
  size_t offset() const { return offset_; }

 private:
  size_t offset_;
};

Bytes encode(const Frame& f);
// The same bytes as encode() of a frame holding copies of `tensors`.
Bytes encode_views(FrameKind kind, uint64_t version, uint64_t ticket,
                   std::span<const nn::TensorView> tensors, Dtype dtype = Dtype::kFloat32);
// Checks everything: magic, format, kind, dtype (against the kind), counts against the kind
// (a ticket has indices and no tensors; activations exactly one tensor ...),
// ranks, dimensions, and that the bytes end exactly after the last tensor.
Frame decode(std::span<const uint8_t> bytes);

}  // namespace dnnlab::hybrid
