// Writers for the data tests: .npy bytes and zip archives (stored or
// deflated), so that every defect can be made on purpose.
#pragma once
#include <zlib.h>

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace dnnlab::data::test {

// A .npy file: version 1, the header padded to 64 bytes as numpy does.
inline std::string npy_bytes(const std::string& descr, const std::vector<int64_t>& shape,
                             const std::string& data, const std::string& extra_header = "") {
  std::string dims;
  for (size_t i = 0; i < shape.size(); ++i) dims += (i ? ", " : "") + std::to_string(shape[i]);
  if (shape.size() == 1) dims += ",";
  std::string dict = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (" + dims +
                     "), " + extra_header + "}";
  while ((10 + dict.size() + 1) % 64) dict += ' ';
  dict += '\n';
  std::string out = "\x93NUMPY";
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(dict.size() & 0xFF);
  out += static_cast<char>(dict.size() >> 8);
  return out + dict + data;
}

template <typename T>
std::string raw_bytes(const std::vector<T>& v) {
  std::string s(v.size() * sizeof(T), '\0');
  if (!v.empty()) std::memcpy(s.data(), v.data(), s.size());
  return s;
}

inline void put16(std::string& s, uint32_t v) {
  s += static_cast<char>(v & 0xFF);
  s += static_cast<char>((v >> 8) & 0xFF);
}
inline void put32(std::string& s, uint32_t v) {
  put16(s, v & 0xFFFF);
  put16(s, v >> 16);
}

inline std::string raw_deflate(const std::string& in) {
  z_stream z{};
  if (deflateInit2(&z, 6, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY) != Z_OK)
    throw std::runtime_error("deflateInit2");
  std::string out(deflateBound(&z, in.size()), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z.avail_in = static_cast<uInt>(in.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  if (deflate(&z, Z_FINISH) != Z_STREAM_END) throw std::runtime_error("deflate");
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

// A zip archive of (name, bytes) members, each deflated when `deflated`.
inline std::string zip_bytes(const std::vector<std::pair<std::string, std::string>>& members,
                             bool deflated) {
  std::string out, dir;
  for (const auto& [name, bytes] : members) {
    const std::string packed = deflated ? raw_deflate(bytes) : bytes;
    const uint32_t crc = static_cast<uint32_t>(
        crc32(0, reinterpret_cast<const Bytef*>(bytes.data()), static_cast<uInt>(bytes.size())));
    const uint32_t offset = static_cast<uint32_t>(out.size());
    const uint16_t method = deflated ? 8 : 0;
    put32(out, 0x04034b50);
    put16(out, 20), put16(out, 0), put16(out, method), put16(out, 0), put16(out, 0x21);
    put32(out, crc), put32(out, static_cast<uint32_t>(packed.size())),
        put32(out, static_cast<uint32_t>(bytes.size()));
    put16(out, static_cast<uint32_t>(name.size())), put16(out, 0);
    out += name + packed;
    put32(dir, 0x02014b50);
    put16(dir, 20), put16(dir, 20), put16(dir, 0), put16(dir, method), put16(dir, 0),
        put16(dir, 0x21);
    put32(dir, crc), put32(dir, static_cast<uint32_t>(packed.size())),
        put32(dir, static_cast<uint32_t>(bytes.size()));
    put16(dir, static_cast<uint32_t>(name.size())), put16(dir, 0), put16(dir, 0), put16(dir, 0),
        put16(dir, 0);
    put32(dir, 0), put32(dir, offset);
    dir += name;
  }
  const uint32_t dir_offset = static_cast<uint32_t>(out.size());
  out += dir;
  put32(out, 0x06054b50);
  put16(out, 0), put16(out, 0), put16(out, static_cast<uint32_t>(members.size())),
      put16(out, static_cast<uint32_t>(members.size()));
  put32(out, static_cast<uint32_t>(dir.size())), put32(out, dir_offset), put16(out, 0);
  return out;
}

}  // namespace dnnlab::data::test
