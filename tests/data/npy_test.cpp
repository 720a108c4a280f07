// NumPy .npy arrays and .npz archives (data/npy.hpp, data/zip.hpp): files
// numpy itself wrote, and every defect named by its byte offset.
#include "data/npy.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <numeric>

#include "data/file_bytes.hpp"
#include "data/zip.hpp"
#include "npy_test_util.hpp"

namespace dnnlab::data {
namespace {

using test::npy_bytes;
using test::raw_bytes;
using test::zip_bytes;

// tests/data/fixtures/: files written by numpy 1.24 (np.save, np.savez,
// np.savez_compressed), so the reader is checked against the real writer.
std::string fixture(const std::string& name) {
  const char* src = std::getenv("DNNLAB_SOURCE_DIR");
  const std::filesystem::path root = src && *src ? std::filesystem::path(src) / "tests/data"
                                                 : std::filesystem::path(__FILE__).parent_path();
  return (root / "fixtures" / name).string();
}

std::pair<int64_t, std::string> npy_error(const std::string& bytes) {
  try {
    parse_npy(bytes, "a.npy");
  } catch (const DataError& e) {
    return {e.offset(), e.what()};
  }
  ADD_FAILURE() << "no error";
  return {-2, ""};
}

std::pair<int64_t, std::string> npz_error(const std::string& bytes) {
  try {
    read_npz(bytes, "a.npz");
  } catch (const DataError& e) {
    return {e.offset(), e.what()};
  }
  ADD_FAILURE() << "no error";
  return {-2, ""};
}

TEST(Npy, ReadsEveryDtypeAndShape) {
  NpyArray a =
      parse_npy(npy_bytes("|u1", {2, 2, 3},
                          std::string("\x00\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\xff", 12)),
                "a.npy");
  EXPECT_EQ(a.dtype(), "uint8");
  EXPECT_EQ(a.shape, (std::vector<int64_t>{2, 2, 3}));
  EXPECT_EQ(a.count(), 12);
  EXPECT_EQ(a.value(11), 255);
  EXPECT_EQ(a.data_offset, 128);  // numpy pads the header to a multiple of 64

  a = parse_npy(npy_bytes("<f4", {3}, raw_bytes(std::vector<float>{1.5f, -2, 3})), "a.npy");
  EXPECT_EQ(a.shape_str(), "(3,)");
  EXPECT_EQ(a.value(1), -2.0);
  a = parse_npy(npy_bytes("<i8", {2}, raw_bytes(std::vector<int64_t>{-7, 9})), "a.npy");
  EXPECT_EQ(a.dtype(), "int64");
  EXPECT_EQ(a.value(0), -7.0);
  a = parse_npy(npy_bytes("|b1", {2}, std::string("\x01\x00", 2)), "a.npy");
  EXPECT_EQ(a.value(0), 1.0);
  EXPECT_EQ(a.value(1), 0.0);
  a = parse_npy(npy_bytes("<u2", {}, raw_bytes(std::vector<uint16_t>{513})), "a.npy");
  EXPECT_EQ(a.count(), 1);
  EXPECT_EQ(a.value(0), 513.0);

  // numpy's own files: big-endian float64, int32.
  a = parse_npy(read_file_bytes(fixture("features-f8be.npy")), "f.npy");
  EXPECT_EQ(a.dtype(), "float64");
  EXPECT_TRUE(a.big_endian);
  EXPECT_EQ(a.shape, (std::vector<int64_t>{4, 3}));
  for (int i = 0; i < 12; ++i) EXPECT_EQ(a.value(i), i / 4.0);
  a = parse_npy(read_file_bytes(fixture("labels-i4.npy")), "l.npy");
  EXPECT_EQ(a.dtype(), "int32");
  EXPECT_EQ(a.value(2), 1.0);
}

TEST(Npy, DefectsNameTheirByteOffset) {
  const std::string good = npy_bytes("<f4", {2, 2}, raw_bytes(std::vector<float>{1, 2, 3, 4}));
  struct Case {
    std::string bytes, want;
    int64_t offset;
  };
  std::string v9 = good;
  v9[6] = 9;
  const Case cases[] = {
      {"PK\x03\x04 not numpy", "does not start with \\x93NUMPY", 0},
      {v9, "unsupported .npy version 9", 6},
      {good.substr(0, 40), "file ends inside the header", 40},
      {good.substr(0, 128 + 10),
       "truncated: the data ends at byte 138 but float32 (2, 2) needs more", 138},
      {good + "xy", "trailing bytes after the data of float32 (2, 2), which ends at byte 144", 144},
      {npy_bytes("<f2", {1}, "ab"), "dtype '<f2' is not supported", 0},
      {npy_bytes("<c8", {1}, "abcdefgh"), "dtype '<c8' is not supported", 0},
      {npy_bytes("<U3", {1}, "abcdefghijkl"), "dtype '<U3' is not supported", 0},
      {npy_bytes("|O8", {1}, "abcdefgh"), "dtype '|O8' is not supported", 0},
      {npy_bytes("<f4", {1}, "abcd", "'x': 1, "), "unknown key 'x'", 0},
  };
  for (const Case& c : cases) {
    auto [off, msg] = npy_error(c.bytes);
    EXPECT_NE(msg.find(c.want), std::string::npos) << msg;
    if (c.offset) {
      EXPECT_EQ(off, c.offset) << msg;
    }
  }
  // Header problems point into the header.
  auto header = [](const std::string& dict) {
    std::string h = dict + "\n";
    std::string out = "\x93NUMPY\x01";
    out += '\0';
    out += static_cast<char>(h.size());
    out += '\0';
    return out + h;
  };
  auto [off, msg] = npy_error(header("{'descr': '<f4', 'fortran_order': True, 'shape': (1,), }"));
  EXPECT_NE(msg.find("fortran_order is True"), std::string::npos) << msg;
  EXPECT_EQ(off, 10 + 38);
  std::tie(off, msg) =
      npy_error(header("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,)}"));
  EXPECT_NE(msg.find("structured dtypes"), std::string::npos) << msg;
  std::tie(off, msg) = npy_error(header("{'descr': '<f4', 'fortran_order': False}"));
  EXPECT_NE(msg.find("missing 'shape'"), std::string::npos) << msg;
  std::tie(off, msg) =
      npy_error(header("{'descr': '<f4', 'fortran_order': False, 'shape': (-1,)}"));
  EXPECT_NE(msg.find("non-negative integer"), std::string::npos) << msg;
  std::tie(off, msg) = npy_error(header(
      "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296, 4294967296)}"));
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
  std::tie(off, msg) =
      npy_error(header("{'descr': '<f4', 'fortran_order': False, 'shape': (1,)} x"));
  EXPECT_NE(msg.find("text after the header's closing"), std::string::npos) << msg;
}

TEST(Npz, ReadsWhatNumpyWrites) {
  for (const char* name : {"tiny-compressed.npz", "tiny-stored.npz"}) {
    const std::vector<NamedArray> z = read_npz(read_file_bytes(fixture(name)), name);
    ASSERT_EQ(z.size(), 4u) << name;
    EXPECT_EQ(z[0].name, "x_train");
    EXPECT_EQ(z[0].array.shape, (std::vector<int64_t>{12, 3, 4}));
    // The values numpy printed when it wrote them.
    const int want[] = {139, 74, 229, 241, 169, 65, 6, 160};
    for (int i = 0; i < 8; ++i) EXPECT_EQ(z[0].array.value(i), want[i]);
    double sum = 0;
    for (int64_t i = 0; i < z[0].array.count(); ++i) sum += z[0].array.value(i);
    EXPECT_EQ(sum, 17684);
    EXPECT_EQ(z[1].name, "y_train");
    EXPECT_EQ(z[1].array.dtype(), "int64");
    EXPECT_EQ(z[3].array.value(0), 2);
  }
}

TEST(Npz, OurArchivesStoredAndDeflated) {
  const std::string x = npy_bytes("<f4", {2, 2}, raw_bytes(std::vector<float>{1, 2, 3, 4}));
  const std::string y = npy_bytes("<i8", {2}, raw_bytes(std::vector<int64_t>{0, 1}));
  for (bool deflated : {false, true}) {
    const std::vector<NamedArray> z =
        read_npz(zip_bytes({{"x.npy", x}, {"y.npy", y}}, deflated), "a.npz");
    ASSERT_EQ(z.size(), 2u);
    EXPECT_EQ(z[0].name, "x");
    EXPECT_EQ(z[0].array.value(3), 4.0);
    EXPECT_EQ(z[1].array.value(1), 1.0);
  }
}

TEST(Npz, DefectsNameTheirByteOffset) {
  const std::string x = npy_bytes("<f4", {2, 2}, raw_bytes(std::vector<float>{1, 2, 3, 4}));
  const std::string stored = zip_bytes({{"x.npy", x}}, false);
  const std::string deflated = zip_bytes({{"x.npy", x}}, true);
  // 30-byte local header + 5-byte name: the member's data starts at 35.
  auto [off, msg] = npz_error("short");
  EXPECT_NE(msg.find("fewer than a zip end record's 22"), std::string::npos) << msg;
  std::tie(off, msg) = npz_error(stored.substr(0, stored.size() - 1));
  EXPECT_NE(msg.find("no end-of-central-directory record"), std::string::npos) << msg;

  std::string bad_crc = stored;
  bad_crc[35 + 130] ^= 1;  // a data byte of the array
  std::tie(off, msg) = npz_error(bad_crc);
  EXPECT_NE(msg.find("CRC-32"), std::string::npos) << msg;
  EXPECT_EQ(off, static_cast<int64_t>(35 + x.size()) + 16);  // the record's CRC field

  std::string corrupt = deflated;
  for (size_t i = 35; i < 45; ++i) corrupt[i] = '\xff';
  std::tie(off, msg) = npz_error(corrupt);
  EXPECT_NE(msg.find("member 'x.npy'"), std::string::npos) << msg;
  EXPECT_GE(off, 35);

  std::string method = stored;
  method[8] = 12;                   // local header: bzip2
  method[35 + x.size() + 10] = 12;  // central directory record
  std::tie(off, msg) = npz_error(method);
  EXPECT_NE(msg.find("compression method 12"), std::string::npos) << msg;
  EXPECT_EQ(off, static_cast<int64_t>(35 + x.size()) + 10);

  std::string encrypted = stored;
  encrypted[6] = 1;
  encrypted[35 + x.size() + 8] = 1;
  std::tie(off, msg) = npz_error(encrypted);
  EXPECT_NE(msg.find("encrypted"), std::string::npos) << msg;

  std::tie(off, msg) = npz_error(zip_bytes({{"notes.txt", "hello"}}, false));
  EXPECT_NE(msg.find("member 'notes.txt' is not a .npy array"), std::string::npos) << msg;

  // A member whose array is bad: named archive:member, offset in the member.
  std::tie(off, msg) = npz_error(zip_bytes({{"x.npy", x.substr(0, 138)}}, true));
  EXPECT_NE(msg.find("a.npz:x.npy at byte 138: truncated"), std::string::npos) << msg;
}

// Every prefix and many single-byte changes of real archives: an error or
// the arrays, never a crash.
TEST(Npz, TruncatedAndGarbledArchivesAreErrorsNeverCrashes) {
  for (const char* name : {"tiny-compressed.npz", "tiny-stored.npz"}) {
    const std::string good = read_file_bytes(fixture(name));
    int errors = 0;
    auto attempt = [&](const std::string& bytes) {
      try {
        read_npz(bytes, name);
      } catch (const DataError&) {
        ++errors;
      }
    };
    for (size_t n = 0; n < good.size(); n += 3) attempt(good.substr(0, n));
    for (size_t i = 0; i < good.size(); ++i)
      for (unsigned char g : {0x00, 0xff, 0x7f}) {
        std::string bad = good;
        bad[i] = static_cast<char>(bad[i] ^ g ^ 0x5a);
        attempt(bad);
      }
    EXPECT_GT(errors, static_cast<int>(good.size())) << name;
  }
}

}  // namespace
}  // namespace dnnlab::data
