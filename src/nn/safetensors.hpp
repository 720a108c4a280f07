// Weights as safetensors (https://huggingface.co/docs/safetensors format):
// an 8-byte little-endian header length, a JSON header, then raw F32 data.
// Works on byte strings so the wasm build can use it without files.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "nn/layer.hpp"

namespace dnnlab::nn {

// Serializes the parameters (by Param::name) plus string metadata.
std::string to_safetensors(const std::vector<Param*>& params,
                           const std::map<std::string, std::string>& metadata = {});
// Loads values into params with the same names and shapes. Throws DataError
// (with the byte offset) for malformed input, missing tensors or shape
// mismatches. Returns the metadata.
std::map<std::string, std::string> from_safetensors(const std::string& bytes,
                                                    const std::vector<Param*>& params,
                                                    const std::string& name = "<weights>");

}  // namespace dnnlab::nn
