// The model as the hybrid trainer splits it: the spec check for its two
// parts, and the whole model assembled from them (for evaluation and the
// safetensors file, whose names are the whole model's).
//
//   hybrid::check_hybrid_spec(spec.model);            // SpecError naming model.parts
//   hybrid::assemble_whole(whole, features, classifier);
#pragma once
#include "nn/model.hpp"
#include "nn/spec.hpp"

namespace dnnlab::hybrid {

// Throws SpecError naming `model.parts` unless the model is exactly two
// parts, `features` then `classifier`, and `model.parts.features` when
// `features` is empty. `classifier` may be empty (`[]`): the clients then
// train the whole model and the server computes the loss (data-parallel).
void check_hybrid_spec(const nn::ModelSpec& model);

// Copies every parameter and state tensor of the two parts into `whole` by
// name (build_part names them as the whole model does).
void assemble_whole(nn::Model& whole, nn::Model& features, nn::Model& classifier);

}  // namespace dnnlab::hybrid
