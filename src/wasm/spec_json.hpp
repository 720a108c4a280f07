// The browser core's model spec: JSON text in, nn::ModelSpec and
// nn::TrainSpec out, read with nn/json.hpp (std-only, so the wasm build
// needs no JSON library); unknown keys and wrong types are SpecErrors naming
// the field and the byte offset.
#pragma once
#include <cstdint>
#include <string>

#include "nn/spec.hpp"

namespace dnnlab::wasm {

struct CoreSpec {
  nn::ModelSpec model;
  nn::TrainSpec train;
  int64_t classes = 0;
};

// Throws SpecError for malformed JSON, unknown keys, wrong types or values
// out of range. Layer names and shapes are checked later by Model::build.
CoreSpec parse_core_spec(const std::string& json);

}  // namespace dnnlab::wasm
