// safetensors writer and reader; the header is read by nn/json.
#include "nn/safetensors.hpp"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "nn/json.hpp"

namespace dnnlab::nn {
namespace {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; so is every dnnlab target");

// Bytes per element, 0 for a dtype dnnlab does not handle.
int64_t dtype_size(std::string_view dtype) {
  if (dtype == "F32") return 4;
  if (dtype == "U8") return 1;
  return 0;
}

}  // namespace

int64_t SafetensorsTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::vector<float> SafetensorsTensor::f32() const {
  if (dtype != "F32")
    throw std::invalid_argument("SafetensorsTensor::f32 on a " + dtype + " tensor");
  std::vector<float> out(data.size() / 4);
  std::memcpy(out.data(), data.data(), out.size() * 4);
  return out;
}

SafetensorsFile read_safetensors(std::string_view bytes, const std::string& name) {
  if (bytes.size() < 8)
    throw DataError(name, static_cast<int64_t>(bytes.size()),
                    "file too short for a safetensors header");
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i)
    n |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
  if (n > bytes.size() - 8)
    throw DataError(name, 0,
                    "header length " + std::to_string(n) + " exceeds the file (" +
                        std::to_string(bytes.size()) + " bytes)");
  json::Value root;
  try {
    // Headers are flat: {name: {dtype, shape: [..], data_offsets: [..]}}.
    root = json::parse(bytes.substr(8, n), 8, /*max_depth=*/16);
  } catch (const json::SyntaxError& e) {
    throw DataError(name, static_cast<int64_t>(e.offset()),
                    std::string("safetensors header: ") + e.what());
  }
  if (root.kind != json::Value::kObject) throw DataError(name, 8, "header is not a JSON object");
  const size_t data_start = 8 + n;
  const uint64_t data_len = bytes.size() - data_start;
  SafetensorsFile out;
  auto bad = [&](const json::Value& v, const std::string& msg) -> DataError {
    return DataError(name, static_cast<int64_t>(v.offset), msg);
  };
  auto whole = [](const json::Value& v) { return v.kind == json::Value::kNumber && v.integer; };
  struct Range {
    int64_t begin, end;
    const std::string* name;
  };
  std::vector<Range> ranges;
  for (auto& [key, t] : root.members) {
    if (key == "__metadata__") {
      if (t.kind != json::Value::kObject) throw bad(t, "__metadata__ is not an object");
      for (auto& [k, v] : t.members) {
        if (v.kind != json::Value::kString)
          throw bad(v, "__metadata__ value '" + k + "' is not a string");
        out.metadata[k] = v.str;
      }
      continue;
    }
    const std::string what = "tensor '" + key + "'";
    if (t.kind != json::Value::kObject) throw bad(t, what + " is not an object");
    if (out.tensors.count(key)) throw bad(t, what + " appears twice");
    const json::Value* dtype = t.get("dtype");
    const json::Value* shape = t.get("shape");
    const json::Value* offs = t.get("data_offsets");
    if (!dtype || dtype->kind != json::Value::kString || !shape ||
        shape->kind != json::Value::kArray || !offs || offs->kind != json::Value::kArray ||
        offs->items.size() != 2)
      throw bad(t, what + " needs dtype, shape and data_offsets [begin, end]");
    const int64_t esize = dtype_size(dtype->str);
    if (!esize) throw bad(*dtype, what + " has dtype " + dtype->str + " (dnnlab reads F32 and U8)");
    SafetensorsTensor st;
    st.dtype = dtype->str;
    uint64_t numel = 1;
    for (const json::Value& d : shape->items) {
      if (!whole(d) || d.i < 0) throw bad(d, what + ": shape entries must be integers >= 0");
      st.shape.push_back(d.i);
      numel = d.i == 0 ? 0 : numel;
      if (numel && static_cast<uint64_t>(d.i) > data_len)
        throw bad(d, what + " is larger than the file");
      numel *= static_cast<uint64_t>(d.i);
      if (numel > data_len) throw bad(d, what + " is larger than the file");
    }
    const json::Value &b = offs->items[0], &e = offs->items[1];
    if (!whole(b) || !whole(e) || b.i < 0 || e.i < b.i || static_cast<uint64_t>(e.i) > data_len)
      throw bad(*offs,
                what + " has data_offsets outside the " + std::to_string(data_len) + " data bytes");
    if (static_cast<uint64_t>(e.i - b.i) != numel * static_cast<uint64_t>(esize))
      throw bad(*offs, what + " holds " + std::to_string(e.i - b.i) + " bytes; " + st.dtype +
                           " of that shape needs " + std::to_string(numel * esize));
    st.offset = static_cast<int64_t>(data_start) + b.i;
    st.data = bytes.substr(data_start + static_cast<size_t>(b.i), static_cast<size_t>(e.i - b.i));
    auto it = out.tensors.emplace(key, std::move(st)).first;
    ranges.push_back({b.i, e.i, &it->first});
  }
  // The data must be the tensors back to back, nothing between or after.
  // (Empty tensors sort before others at the same offset.)
  std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  int64_t at = 0;
  for (const Range& r : ranges) {
    if (r.begin != at)
      throw DataError(
          name, static_cast<int64_t>(data_start) + std::min(r.begin, at),
          "tensor '" + *r.name + "' " +
              (r.begin < at ? "overlaps the tensor before it" : "leaves a gap before it"));
    at = r.end;
  }
  if (static_cast<uint64_t>(at) != data_len)
    throw DataError(
        name, static_cast<int64_t>(data_start) + at,
        std::to_string(data_len - static_cast<uint64_t>(at)) + " bytes after the last tensor");
  return out;
}

std::string write_safetensors(const std::vector<SafetensorsInput>& tensors,
                              const std::map<std::string, std::string>& metadata) {
  std::vector<const SafetensorsInput*> order;
  for (const SafetensorsInput& t : tensors) {
    const int64_t esize = dtype_size(t.dtype);
    if (!esize) throw std::invalid_argument("write_safetensors: unknown dtype " + t.dtype);
    int64_t numel = 1;
    for (int64_t d : t.shape) numel *= d;
    if (static_cast<uint64_t>(numel * esize) != t.data.size())
      throw std::invalid_argument("write_safetensors: '" + t.name + "' has " +
                                  std::to_string(t.data.size()) + " bytes for " +
                                  std::to_string(numel) + " " + t.dtype + " elements");
    if (t.name == "__metadata__") throw std::invalid_argument("write_safetensors: reserved name");
    order.push_back(&t);
  }
  std::stable_sort(order.begin(), order.end(), [](const auto* a, const auto* b) {
    return dtype_size(a->dtype) > dtype_size(b->dtype);
  });
  for (size_t i = 1; i < order.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (order[i]->name == order[j]->name)
        throw std::invalid_argument("write_safetensors: duplicate name '" + order[i]->name + "'");
  std::string h = "{";
  if (!metadata.empty()) {
    h += "\"__metadata__\":{";
    bool first = true;
    for (auto& [k, v] : metadata) {
      h += (first ? "\"" : ",\"") + json::escape(k) + "\":\"" + json::escape(v) + "\"";
      first = false;
    }
    h += "}";
  }
  int64_t off = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    const SafetensorsInput& t = *order[i];
    h += (i || !metadata.empty() ? ",\"" : "\"") + json::escape(t.name) + "\":{\"dtype\":\"" +
         t.dtype + "\",\"shape\":[";
    for (size_t d = 0; d < t.shape.size(); ++d) {
      if (d) h += ',';
      h += std::to_string(t.shape[d]);
    }
    const auto bytes = static_cast<int64_t>(t.data.size());
    h += "],\"data_offsets\":[" + std::to_string(off) + "," + std::to_string(off + bytes) + "]}";
    off += bytes;
  }
  h += "}";
  while ((h.size() + 8) % 8) h += ' ';  // keeps the data 8-byte aligned
  std::string out(8, '\0');
  const uint64_t n = h.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  out.reserve(out.size() + h.size() + static_cast<size_t>(off));
  out += h;
  for (const SafetensorsInput* t : order) out.append(t->data);
  return out;
}

std::string to_safetensors(const std::vector<Param*>& params,
                           const std::map<std::string, std::string>& metadata) {
  std::vector<SafetensorsInput> in;
  for (Param* p : params) {
    const Tensor& t = p->value;
    std::vector<int64_t> shape;
    for (int d = 0; d < t.shape().rank; ++d) shape.push_back(t.shape()[d]);
    in.push_back({p->name,
                  "F32",
                  std::move(shape),
                  {reinterpret_cast<const char*>(t.data()), static_cast<size_t>(t.numel()) * 4}});
  }
  return write_safetensors(in, metadata);
}

std::map<std::string, std::string> from_safetensors(const std::string& bytes,
                                                    const std::vector<Param*>& params,
                                                    const std::string& name) {
  SafetensorsFile f = read_safetensors(bytes, name);
  for (Param* p : params) {
    auto it = f.tensors.find(p->name);
    if (it == f.tensors.end()) throw DataError(name, 8, "tensor '" + p->name + "' is missing");
    const SafetensorsTensor& t = it->second;
    if (t.dtype != "F32")
      throw DataError(name, 8, "tensor '" + p->name + "' has dtype " + t.dtype + ", not F32");
    Shape s;
    if (t.shape.size() > static_cast<size_t>(kMaxRank))
      throw DataError(name, 8, "tensor '" + p->name + "' has too many dimensions");
    s.rank = static_cast<int>(t.shape.size());
    for (int d = 0; d < s.rank; ++d) s[d] = t.shape[d];
    if (!(s == p->value.shape()))
      throw DataError(name, 8,
                      "tensor '" + p->name + "' has shape " + s.str() + ", the model expects " +
                          p->value.shape().str());
    std::memcpy(p->value.data(), t.data.data(), t.data.size());
  }
  return f.metadata;
}

}  // namespace dnnlab::nn
