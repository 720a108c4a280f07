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
//   0  magic "DNHF"          4  format version (2)     5  kind
//   6  dtype (0 float32, 1 float16, 2 int8)           7  flags (bit 0: error feedback)
//   8  model version u64    16  ticket id u64
//  24  index count u32      28  tensor count u32
//  32  compute time u32: the microseconds the client computed this frame's
//      answer (activations: the forward; weight gradients: the backward);
//      0 in every other kind. Reported, not trusted: shown only, within the
//      turnaround the server measured.
//  36  indices u32 x count, then per tensor: rank u32 (1..4), dims u32 x rank
//      (each >= 1), the values as float32 (or float16) x product(dims); in
//      int8, one float32 scale per block of kInt8Block values, then the
//      values as int8 (-127..127), value = q x its block's scale.
// float16 and int8 are allowed for tickets (answer in that dtype),
// activations and activation gradients; weights and gradients stay float32.
// Nothing may follow the last tensor. The flags byte is 0 but in an int8
// ticket, where bit 0 asks the client for error feedback on its activations.
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

inline constexpr uint8_t kFrameFormat = 2;  // 1: no compute time (header of 32 bytes)
inline constexpr size_t kFrameHeaderBytes = 36;
// Bounds a frame cannot exceed, whatever its length says.
inline constexpr uint32_t kMaxIndices = 1u << 20;
inline constexpr uint32_t kMaxTensors = 4096;
inline constexpr int64_t kMaxTensorValues = int64_t{1} << 28;

enum class Dtype : uint8_t { kFloat32 = 0, kFloat16 = 1, kInt8 = 2 };
inline constexpr int kDtypes = 3;
const char* dtype_name(Dtype d);

// int8: symmetric blocks of kInt8Block consecutive values (the last block of
// a tensor may be shorter), each with a float32 scale s = max|x| / 127 (0
// for a block of zeros); a value travels as q = round(x / s) in -127..127
// and is read as q x s: within s / 2 of x, plus the float rounding of
// q x s (at most 127 x s x 2^-24), docs/distributed.md "Bytes".
inline constexpr int64_t kInt8Block = 128;
// The bytes of n values in dtype d (scales included).
int64_t value_bytes(Dtype d, int64_t n);
// The scale encode() gives a block: max|x| / 127, nudged so that 127 x s
// covers max|x| and stays finite (denormal and huge blocks included).
float int8_scale(std::span<const float> block);
// What a receiver reads of `values` sent in `dtype`, written over them
// (float32: unchanged; float16: rounded; int8: quantised per block). In
// int8 a non-finite value cannot travel: then nothing is changed and the
// result is false (encode() sends such a frame in float32).
bool wire_round(std::span<float> values, Dtype dtype);
// A decoded int8 tensor's block scales, as max|v| / 127 per block (the
// largest value of a non-zero block is 127 x its scale): within a rounding
// of the scales sent.
std::vector<float> int8_block_scales(nn::TensorView decoded);

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
  // An int8 ticket's flag: the client carries the quantisation error of its
  // activations into its next ones (docs/distributed.md "Bytes").
  bool feedback = false;
  // Activations and weight gradients: the client's compute time for them,
  // in microseconds (saturating); 0 in the other kinds.
  uint32_t compute_us = 0;
};

// Seconds as a frame's compute time: rounded to microseconds, clamped to
// 0..UINT32_MAX (about 71 minutes).
uint32_t compute_micros(double seconds);

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

// An int8 frame holding a non-finite value is written in float32 (dtype 0),
// so that the receiver's finiteness checks see it: a NaN is never
// quantised away.
Bytes encode(const Frame& f);
// The same bytes as encode() of a frame holding copies of `tensors`.
Bytes encode_views(FrameKind kind, uint64_t version, uint64_t ticket,
                   std::span<const nn::TensorView> tensors, Dtype dtype = Dtype::kFloat32);
// Checks everything: magic, format, kind, dtype (against the kind), counts against the kind
// (a ticket has indices and no tensors; activations exactly one tensor ...),
// ranks, dimensions, and that the bytes end exactly after the last tensor.
Frame decode(std::span<const uint8_t> bytes);

}  // namespace dnnlab::hybrid
