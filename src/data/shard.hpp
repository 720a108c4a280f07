// Data shards: a dataset's train, validation and test splits in one
// safetensors file, as browsers fetch them (docs/protocol.md, "Data shards").
// Standard library only, so the browser core decodes shards with this code.
//
//   data::LoadOptions o = ...;  o.keep_raw = true;   // U8 shards need the bytes
//   std::string bytes = data::encode_shard(data::load(o));
//   data::Dataset ds = data::decode_shard(bytes);    // the same floats, bit for bit
//
// Tensors: train_x/val_x/test_x, U8 (pixels, with `lut` F32[256] their
// normalized values) or F32 (already normalized), shape [N, features];
// train_y/val_y/test_y U8 [N]. __metadata__: format=dnnlab-shard, version=1,
// dataset, classes, sample_shape (comma-separated), normalize, dataset_sha256.
#pragma once
#include <string>
#include <string_view>

#include "data/dataset.hpp"

namespace dnnlab::data {

inline constexpr const char* kShardFormat = "dnnlab-shard";
inline constexpr const char* kShardVersion = "1";

// U8 pixels when the dataset has a lut and every split kept its bytes
// (LoadOptions::keep_raw); F32 otherwise (the synthetic set, or no raw bytes).
// Throws DataError when the dataset does not fit a shard (more than 256
// classes, labels out of range, inconsistent sizes).
std::string encode_shard(const Dataset& ds);

// Parses and checks a shard: format and version, every tensor's dtype and
// shape against the metadata and each other, labels < classes, a finite lut
// and finite F32 data. Throws DataError naming `name`, the tensor or key, and
// the byte offset. U8 pixels are normalized through the lut; keep_raw keeps
// them in Split::raw as well.
Dataset decode_shard(std::string_view bytes, const std::string& name = "<shard>",
                     bool keep_raw = false);

}  // namespace dnnlab::data
