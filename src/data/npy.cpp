// .npy parsing (a tiny reader of the header's Python dict literal) and .npz
// archives through zip.hpp.
#include "data/npy.hpp"

#include <bit>
#include <cstring>

#include "data/zip.hpp"

namespace dnnlab::data {
namespace {

// Reads the header dict: {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
class HeaderParser {
 public:
  HeaderParser(std::string_view h, int64_t base, const std::string& file)
      : h_(h), base_(base), file_(file) {}

  [[noreturn]] void fail(const std::string& msg) const {
    throw DataError(file_, base_ + static_cast<int64_t>(i_), "npy header: " + msg);
  }
  void ws() {
    while (i_ < h_.size() && (h_[i_] == ' ' || h_[i_] == '\t' || h_[i_] == '\n' || h_[i_] == '\r'))
      ++i_;
  }
  bool peek(char c) {
    ws();
    return i_ < h_.size() && h_[i_] == c;
  }
  void expect(char c) {
    if (!peek(c))
      fail(std::string("expected '") + c + "'" +
           (i_ < h_.size() ? std::string(", found '") + printable(h_[i_]) + "'"
                           : ", found the end"));
    ++i_;
  }
  std::string str() {
    ws();
    if (i_ >= h_.size() || (h_[i_] != '\'' && h_[i_] != '"')) fail("expected a quoted string");
    const char q = h_[i_++];
    const size_t end = h_.find(q, i_);
    if (end == std::string_view::npos) fail("unterminated string");
    std::string s(h_.substr(i_, end - i_));
    i_ = end + 1;
    return s;
  }
  bool boolean() {
    ws();
    if (h_.substr(i_, 4) == "True") return i_ += 4, true;
    if (h_.substr(i_, 5) == "False") return i_ += 5, false;
    fail("expected True or False");
  }
  std::vector<int64_t> tuple() {
    expect('(');
    std::vector<int64_t> dims;
    while (!peek(')')) {
      ws();
      int64_t v = 0;
      size_t digits = 0;
      while (i_ < h_.size() && h_[i_] >= '0' && h_[i_] <= '9') {
        if (++digits > 12) fail("a dimension is larger than 10^12");
        v = v * 10 + (h_[i_++] - '0');
      }
      if (digits == 0) fail("expected a non-negative integer dimension");
      if (i_ < h_.size() && h_[i_] == 'L') ++i_;  // Python 2's long suffix
      if (dims.size() >= 32) fail("more than 32 dimensions");
      dims.push_back(v);
      if (peek(','))
        ++i_;
      else if (!peek(')'))
        fail("expected ',' or ')' in the shape");
    }
    ++i_;
    return dims;
  }
  size_t pos() const { return i_; }
  bool done() {
    ws();
    return i_ == h_.size();
  }

 private:
  static char printable(char c) {
    return static_cast<unsigned char>(c) < 0x20 || c == 0x7F ? '?' : c;
  }
  std::string_view h_;
  size_t i_ = 0;
  int64_t base_;
  const std::string& file_;
};

void read_descr(const std::string& d, NpyArray& a, HeaderParser& p) {
  if (d.size() < 3) p.fail("dtype '" + d + "' is not supported");
  const char order = d[0];
  if (order != '<' && order != '>' && order != '|' && order != '=')
    p.fail("dtype '" + d + "' has no byte order");
  a.kind = d[1];
  a.big_endian = order == '>';
  const std::string size = d.substr(2);
  a.item_size = size == "1" ? 1 : size == "2" ? 2 : size == "4" ? 4 : size == "8" ? 8 : 0;
  const bool ok = (a.kind == 'b' && a.item_size == 1) ||
                  ((a.kind == 'i' || a.kind == 'u') && a.item_size != 0) ||
                  (a.kind == 'f' && (a.item_size == 4 || a.item_size == 8));
  if (!ok)
    p.fail("dtype '" + d +
           "' is not supported (bool, int8..int64, uint8..uint64, float32 and float64 are)");
}

template <typename T>
T load(const char* p, bool swap) {
  unsigned char b[sizeof(T)];
  std::memcpy(b, p, sizeof(T));
  if (swap)
    for (size_t i = 0; i < sizeof(T) / 2; ++i) std::swap(b[i], b[sizeof(T) - 1 - i]);
  T v;
  std::memcpy(&v, b, sizeof(T));
  return v;
}

}  // namespace

int64_t NpyArray::count() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string NpyArray::dtype() const {
  if (kind == 'b') return "bool";
  if (kind == 'f') return item_size == 4 ? "float32" : "float64";
  return std::string(kind == 'u' ? "uint" : "int") + std::to_string(item_size * 8);
}

std::string NpyArray::shape_str() const {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

double NpyArray::value(int64_t i) const {
  const char* p = data.data() + i * item_size;
  const bool swap = big_endian != (std::endian::native == std::endian::big);
  switch (kind) {
    case 'b':
      return *p ? 1.0 : 0.0;
    case 'u':
      switch (item_size) {
        case 1:
          return static_cast<uint8_t>(*p);
        case 2:
          return load<uint16_t>(p, swap);
        case 4:
          return load<uint32_t>(p, swap);
        default:
          return static_cast<double>(load<uint64_t>(p, swap));
      }
    case 'i':
      switch (item_size) {
        case 1:
          return static_cast<int8_t>(*p);
        case 2:
          return load<int16_t>(p, swap);
        case 4:
          return load<int32_t>(p, swap);
        default:
          return static_cast<double>(load<int64_t>(p, swap));
      }
    default:
      return item_size == 4 ? load<float>(p, swap) : load<double>(p, swap);
  }
}

NpyArray parse_npy(std::string_view b, const std::string& file) {
  static constexpr std::string_view kMagic = "\x93NUMPY";
  if (b.size() < 10)
    throw DataError(
        file, static_cast<int64_t>(b.size()),
        "not a .npy file: " + std::to_string(b.size()) + " bytes, fewer than its 10-byte preamble");
  if (b.substr(0, 6) != kMagic)
    throw DataError(file, 0, "not a .npy file: it does not start with \\x93NUMPY");
  const int major = static_cast<uint8_t>(b[6]);
  if (major < 1 || major > 3)
    throw DataError(file, 6,
                    "unsupported .npy version " + std::to_string(major) + " (1, 2 and 3 are)");
  size_t header_len = 0, start = 0;
  auto byte = [&](size_t i) { return static_cast<size_t>(static_cast<uint8_t>(b[i])); };
  if (major == 1) {
    header_len = byte(8) | (byte(9) << 8);
    start = 10;
  } else {
    if (b.size() < 12)
      throw DataError(file, static_cast<int64_t>(b.size()), "file ends inside the header length");
    header_len = byte(8) | (byte(9) << 8) | (byte(10) << 16) | (byte(11) << 24);
    start = 12;
  }
  if (header_len > b.size() - start)
    throw DataError(file, static_cast<int64_t>(b.size()),
                    "file ends inside the header (" + std::to_string(header_len) +
                        " bytes from byte " + std::to_string(start) + ")");
  NpyArray a;
  HeaderParser p(b.substr(start, header_len), static_cast<int64_t>(start), file);
  bool have_descr = false, have_order = false, have_shape = false;
  p.expect('{');
  while (!p.peek('}')) {
    const std::string key = p.str();
    p.expect(':');
    if (key == "descr") {
      if (p.peek('[')) p.fail("structured dtypes (a list of fields) are not supported");
      read_descr(p.str(), a, p);
      have_descr = true;
    } else if (key == "fortran_order") {
      if (p.boolean())
        p.fail("fortran_order is True: save the array in C order (np.ascontiguousarray)");
      have_order = true;
    } else if (key == "shape") {
      a.shape = p.tuple();
      have_shape = true;
    } else {
      p.fail("unknown key '" + key + "' (a .npy header has descr, fortran_order and shape)");
    }
    if (p.peek(','))
      p.expect(',');
    else if (!p.peek('}'))
      p.fail("expected ',' or '}'");
  }
  p.expect('}');
  if (!p.done()) p.fail("text after the header's closing '}'");
  if (!have_descr || !have_order || !have_shape)
    p.fail(std::string("missing '") +
           (!have_descr   ? "descr"
            : !have_order ? "fortran_order"
                          : "shape") +
           "'");

  const size_t data_start = start + header_len;
  const size_t have = b.size() - data_start;
  // The shape's product, stopped as soon as it passes what the file holds
  // (it cannot overflow: each factor is at most 10^12).
  size_t need = static_cast<size_t>(a.item_size);
  bool zero = false;
  for (int64_t d : a.shape) zero |= d == 0;
  for (int64_t d : a.shape) {
    if (zero) {
      need = 0;
      break;
    }
    if (need > have / static_cast<size_t>(d)) {
      need = have + 1;
      break;
    }
    need *= static_cast<size_t>(d);
  }
  if (need > have)
    throw DataError(file, static_cast<int64_t>(b.size()),
                    "truncated: the data ends at byte " + std::to_string(b.size()) + " but " +
                        a.dtype() + " " + a.shape_str() + " needs more than its " +
                        std::to_string(have) + " bytes after the header");
  if (need < have)
    throw DataError(file, static_cast<int64_t>(data_start + need),
                    "trailing bytes after the data of " + a.dtype() + " " + a.shape_str() +
                        ", which ends at byte " + std::to_string(data_start + need));
  a.data.assign(b.substr(data_start));
  a.data_offset = static_cast<int64_t>(data_start);
  return a;
}

std::vector<NamedArray> read_npz(std::string_view archive, const std::string& file) {
  std::vector<NamedArray> out;
  for (const ZipEntry& e : read_zip_directory(archive, file)) {
    if (e.name.size() < 4 || e.name.compare(e.name.size() - 4, 4, ".npy") != 0)
      throw DataError(file, e.record_offset,
                      "member '" + e.name + "' is not a .npy array (an .npz holds only those)");
    const std::string member = zip_extract(archive, e, file);
    out.push_back({e.name.substr(0, e.name.size() - 4), parse_npy(member, file + ":" + e.name)});
  }
  return out;
}

}  // namespace dnnlab::data
