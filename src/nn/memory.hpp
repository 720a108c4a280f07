// What training a model holds in memory, worked out from its shapes before
// anything is allocated, so that a spec too large for the machine is refused
// with a message instead of ending in std::bad_alloc half-way through.
//
//   nn::MemoryEstimate m = nn::Model::estimate_memory(spec.model, input, spec.train);
//   if (m.total() > limit) ...   // nn::format_bytes(m.total()) -> "1.2 GiB"
//
// The figure is an upper bound of what the model itself allocates (its
// parameters, their gradients, the optimizer's buffers, every node's output
// and output gradient for the largest batch it sees, and the scratch some
// layers keep); the data set is not in it.
#pragma once
#include <cstdint>
#include <span>
#include <string>

#include "nn/spec.hpp"

namespace dnnlab::nn {

// Model::evaluate's batch: activations are sized for it when it is larger
// than the training batch.
inline constexpr int64_t kEvalBatch = 512;

// One node of a built graph, as estimate_memory needs it (in floats).
struct NodeFootprint {
  int64_t out_per_sample = 0;      // the node's output, one sample
  int64_t scratch_per_sample = 0;  // what the layer keeps per sample (a dropout mask, argmax)
  int64_t scratch_fixed = 0;       // what it keeps whatever the batch (a transposed weight)
  int64_t params = 0;              // trainable values
  int64_t state = 0;               // non-trainable (BatchNorm running statistics)
};

struct MemoryEstimate {
  int64_t weights = 0;      // parameters and state
  int64_t gradients = 0;    // one per parameter
  int64_t optimizer = 0;    // the optimizer's per-parameter buffers
  int64_t activations = 0;  // outputs, their gradients, layer scratch and the input batch
  int64_t total() const;    // saturates at INT64_MAX
  // "weights 1.2 MiB + gradients ... + activations 3.0 GiB (batch 64) = 3.0 GiB"
  std::string describe(int64_t batch) const;
};

// The bytes a model of these nodes needs to train with `batch` samples per
// step under `optimizer` (its buffers per parameter: sgd 1, adam 2, rmsprop
// 1 to 3, adagrad 1). Saturates rather than overflows: a spec can ask for
// more than int64_t bytes.
MemoryEstimate estimate_memory(std::span<const NodeFootprint> nodes, int64_t input_per_sample,
                               int64_t batch, const OptimizerSpec& optimizer);

// "512 B", "1.5 KiB", "3.0 GiB".
std::string format_bytes(int64_t bytes);

}  // namespace dnnlab::nn
