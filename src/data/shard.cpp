// Shard files (see shard.hpp): a Dataset to and from safetensors bytes.
#include "data/shard.hpp"

#include <cmath>
#include <cstring>

#include "data/normalize.hpp"
#include "nn/safetensors.hpp"

namespace dnnlab::data {
namespace {

constexpr const char* kSplitNames[3] = {"train", "val", "test"};

// "28,28": dims joined by commas (built by appending: GCC 12 warns on "," + s).
std::string join_dims(const std::vector<int64_t>& dims) {
  std::string out;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i) out += ',';
    out += std::to_string(dims[i]);
  }
  return out;
}

std::string shape_string(const nn::Shape& s) {
  return join_dims(std::vector<int64_t>(s.d.begin(), s.d.begin() + s.rank));
}

// A positive decimal integer, or -1.
int64_t parse_count(const std::string& s) {
  if (s.empty() || s.size() > 12) return -1;
  int64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return -1;
    v = v * 10 + (c - '0');
  }
  return v;
}

}  // namespace

std::string encode_shard(const Dataset& ds) {
  const std::string who = ds.name.empty() ? "<dataset>" : ds.name;
  if (ds.num_classes < 1 || ds.num_classes > 256)
    throw DataError(who, -1,
                    "a shard stores labels as U8: classes must be in [1, 256], not " +
                        std::to_string(ds.num_classes));
  const int64_t features = ds.sample_shape.numel();
  if (features <= 0) throw DataError(who, -1, "sample_shape is empty");
  const Split* splits[3] = {&ds.train, &ds.val, &ds.test};
  bool u8 = ds.lut.size() == 256;
  for (const Split* s : splits) {
    if (s->x.numel() != s->size() * features && !(s->size() == 0 && s->x.numel() == 0))
      throw DataError(who, -1,
                      "a split holds " + std::to_string(s->x.numel()) + " floats for " +
                          std::to_string(s->size()) + " samples of [" +
                          shape_string(ds.sample_shape) + "]");
    u8 = u8 && static_cast<int64_t>(s->raw.size()) == s->size() * features;
  }
  std::vector<std::vector<uint8_t>> labels(3);
  std::vector<nn::SafetensorsInput> tensors;
  for (int i = 0; i < 3; ++i) {
    const Split& s = *splits[i];
    const std::string name = kSplitNames[i];
    for (size_t k = 0; k < s.y.size(); ++k) {
      if (s.y[k] < 0 || s.y[k] >= ds.num_classes)
        throw DataError(who, -1,
                        name + " label " + std::to_string(s.y[k]) + " at index " +
                            std::to_string(k) + " is outside [0, " +
                            std::to_string(ds.num_classes) + ")");
      labels[i].push_back(static_cast<uint8_t>(s.y[k]));
    }
    const size_t n = static_cast<size_t>(s.size() * features);
    std::string_view x = u8 ? nn::bytes_of(s.raw)
                            : std::string_view(reinterpret_cast<const char*>(s.x.data()), n * 4);
    tensors.push_back({name + "_x", u8 ? "U8" : "F32", {s.size(), features}, x});
    tensors.push_back({name + "_y", "U8", {s.size()}, nn::bytes_of(labels[i])});
  }
  if (u8) tensors.push_back({"lut", "F32", {256}, nn::bytes_of(ds.lut)});
  return nn::write_safetensors(tensors, {{"format", kShardFormat},
                                         {"version", kShardVersion},
                                         {"dataset", ds.name},
                                         {"classes", std::to_string(ds.num_classes)},
                                         {"sample_shape", shape_string(ds.sample_shape)},
                                         {"normalize", ds.normalize},
                                         {"dataset_sha256", ds.sha256}});
}

Dataset decode_shard(std::string_view bytes, const std::string& name, bool keep_raw) {
  nn::SafetensorsFile f = nn::read_safetensors(bytes, name);
  auto meta = [&](const char* key) -> const std::string& {
    auto it = f.metadata.find(key);
    if (it == f.metadata.end())
      throw DataError(name, 8, std::string("__metadata__ lacks '") + key + "'");
    return it->second;
  };
  if (meta("format") != kShardFormat)
    throw DataError(name, 8,
                    "__metadata__ format is '" + meta("format") + "', not " + kShardFormat);
  if (meta("version") != kShardVersion)
    throw DataError(name, 8,
                    "shard version " + meta("version") + " is not supported (this build reads " +
                        kShardVersion + ")");
  Dataset ds;
  ds.name = meta("dataset");
  ds.dir = "(shard)";
  ds.sha256 = meta("dataset_sha256");
  ds.normalize = meta("normalize");
  const int64_t classes = parse_count(meta("classes"));
  if (classes < 1 || classes > 256)
    throw DataError(name, 8, "__metadata__ classes '" + meta("classes") + "' is not in [1, 256]");
  ds.num_classes = static_cast<int>(classes);
  for (int c = 0; c < ds.num_classes; ++c) ds.class_names.push_back(std::to_string(c));
  {
    const std::string& ss = meta("sample_shape");
    size_t at = 0;
    for (;;) {
      const size_t comma = ss.find(',', at);
      const int64_t d = parse_count(ss.substr(at, comma == std::string::npos ? comma : comma - at));
      if (d < 1 || ds.sample_shape.rank == nn::kMaxRank - 1)
        throw DataError(name, 8, "__metadata__ sample_shape '" + ss + "' is not a list of sizes");
      ds.sample_shape[ds.sample_shape.rank++] = d;
      if (comma == std::string::npos) break;
      at = comma + 1;
    }
  }
  const int64_t features = ds.sample_shape.numel();
  auto tensor = [&](const std::string& t) -> const nn::SafetensorsTensor& {
    auto it = f.tensors.find(t);
    if (it == f.tensors.end()) throw DataError(name, 8, "tensor '" + t + "' is missing");
    return it->second;
  };
  auto expect_shape = [&](const std::string& t, const std::vector<int64_t>& want) {
    const nn::SafetensorsTensor& st = tensor(t);
    if (st.shape != want)
      throw DataError(name, 8,
                      "tensor '" + t + "' has shape [" + join_dims(st.shape) + "], expected [" +
                          join_dims(want) + "]");
  };
  const std::string dtype = tensor("train_x").dtype;
  const bool u8 = dtype == "U8";
  for (auto& [t, st] : f.tensors) {
    const bool known = t == "lut" ? u8
                                  : (t == "train_x" || t == "val_x" || t == "test_x" ||
                                     t == "train_y" || t == "val_y" || t == "test_y");
    if (!known) throw DataError(name, 8, "unexpected tensor '" + t + "'");
  }
  if (u8) {
    expect_shape("lut", {256});
    const nn::SafetensorsTensor& t = tensor("lut");
    if (t.dtype != "F32") throw DataError(name, 8, "tensor 'lut' must be F32, not " + t.dtype);
    ds.lut = t.f32();
    for (int v = 0; v < 256; ++v)
      if (!std::isfinite(ds.lut[v]))
        throw DataError(name, t.offset + 4 * v,
                        "lut entry " + std::to_string(v) + " is not a finite number");
  }
  Split* splits[3] = {&ds.train, &ds.val, &ds.test};
  for (int i = 0; i < 3; ++i) {
    const std::string sn = kSplitNames[i];
    const nn::SafetensorsTensor& y = tensor(sn + "_y");
    if (y.dtype != "U8")
      throw DataError(name, 8, "tensor '" + sn + "_y' must be U8, not " + y.dtype);
    if (y.shape.size() != 1) throw DataError(name, 8, "tensor '" + sn + "_y' must have shape [N]");
    const int64_t n = y.shape[0];
    const nn::SafetensorsTensor& x = tensor(sn + "_x");
    if (x.dtype != dtype)
      throw DataError(name, 8, "tensor '" + sn + "_x' is " + x.dtype + " but train_x is " + dtype);
    if (!u8 && dtype != "F32")
      throw DataError(name, 8, "tensor '" + sn + "_x' must be U8 or F32, not " + dtype);
    expect_shape(sn + "_x", {n, features});
    Split& s = *splits[i];
    s.y.resize(static_cast<size_t>(n));
    for (int64_t k = 0; k < n; ++k) {
      const auto label = static_cast<uint8_t>(y.data[static_cast<size_t>(k)]);
      if (label >= classes)
        throw DataError(name, y.offset + k,
                        "tensor '" + sn + "_y': label " + std::to_string(label) + " of sample " +
                            std::to_string(k) +
                            " is not below classes = " + std::to_string(classes));
      s.y[static_cast<size_t>(k)] = label;
    }
    nn::Shape xs = ds.sample_shape;  // [n, sample...]
    for (int d = xs.rank; d > 0; --d) xs[d] = xs[d - 1];
    xs[0] = n;
    ++xs.rank;
    s.x.resize(xs);
    if (n == 0) continue;
    const int64_t count = n * features;
    if (u8) {
      const auto* px = reinterpret_cast<const uint8_t*>(x.data.data());
      normalize_bytes(px, count, ds.lut.data(), s.x.data());
      if (keep_raw) s.raw.assign(px, px + count);
    } else {
      std::memcpy(s.x.data(), x.data.data(), x.data.size());
      const float* v = s.x.data();
      for (int64_t k = 0; k < count; ++k)
        if (!std::isfinite(v[k]))
          throw DataError(
              name, x.offset + 4 * k,
              "tensor '" + sn + "_x' holds a non-finite value at element " + std::to_string(k));
    }
  }
  return ds;
}

}  // namespace dnnlab::data
