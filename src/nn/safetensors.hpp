// Safetensors (https://huggingface.co/docs/safetensors): an 8-byte
// little-endian header length, a JSON header naming each tensor's dtype, shape
// and byte range, then the raw little-endian data. Works on byte strings so
// the wasm build can use it without files.
//
//   // Any tensors (F32 or U8) plus string metadata:
//   std::vector<float> w = ...;  std::vector<uint8_t> px = ...;
//   std::string bytes = nn::write_safetensors(
//       {{"w", "F32", {2, 3}, nn::bytes_of(w)}, {"px", "U8", {6}, nn::bytes_of(px)}},
//       {{"format", "mine"}});
//   nn::SafetensorsFile f = nn::read_safetensors(bytes, "w.safetensors");
//   const nn::SafetensorsTensor& t = f.tensors.at("w");  // t.data views `bytes`
//   std::vector<float> back = t.f32();
//
//   // A model's parameters, matched by Param::name:
//   std::string file = nn::to_safetensors(model.saved_tensors(), {{"spec", "..."}});
//   nn::from_safetensors(file, model.saved_tensors());   // weights and running statistics
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "nn/layer.hpp"

namespace dnnlab::nn {

// One tensor of a parsed file. `data` points into the bytes that were read:
// they must outlive it.
struct SafetensorsTensor {
  std::string dtype;           // "F32" or "U8" (others are rejected when reading)
  std::vector<int64_t> shape;  // may be empty (a scalar)
  std::string_view data;       // exactly numel * dtype size bytes
  int64_t offset = 0;          // where `data` starts in the file (for error messages)
  int64_t numel() const;
  std::vector<float> f32() const;  // dtype must be F32
};

struct SafetensorsFile {
  std::map<std::string, std::string> metadata;  // "__metadata__": strings only
  std::map<std::string, SafetensorsTensor> tensors;
};

// Parses and checks a whole file: header JSON, dtypes, shapes, data ranges
// (in bounds, sized numel * dtype size, contiguous and covering the data, as
// the reference implementation requires). Throws DataError naming `name` and
// the byte offset of the problem.
SafetensorsFile read_safetensors(std::string_view bytes, const std::string& name = "<safetensors>");
// The tensors view `bytes`: a temporary string would leave them dangling.
SafetensorsFile read_safetensors(std::string&& bytes,
                                 const std::string& name = "<safetensors>") = delete;

// One tensor to write: `data` must hold numel * dtype size bytes.
struct SafetensorsInput {
  std::string name;
  std::string dtype;  // "F32" or "U8"
  std::vector<int64_t> shape;
  std::string_view data;
};

// Serializes tensors and string metadata. Data is ordered by dtype size
// (largest first; otherwise as given), so every F32 tensor starts 4-byte
// aligned in the file and can be viewed in place. Throws std::invalid_argument for
// an unknown dtype, a size mismatch or a duplicate name (programmer errors).
std::string write_safetensors(const std::vector<SafetensorsInput>& tensors,
                              const std::map<std::string, std::string>& metadata = {});

// Raw bytes of a contiguous array, for SafetensorsInput::data.
template <class T>
std::string_view bytes_of(const std::vector<T>& v) {
  return {reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T)};
}

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
