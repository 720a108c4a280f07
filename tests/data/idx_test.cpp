// read_idx: round trips (gzip and raw) and one test per kind of defect, each
// checking the byte offset the DataError names.
#include "data/idx.hpp"

#include <gtest/gtest.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>

#include "data_test_util.hpp"

namespace dnnlab::data {
namespace {

using test::idx_bytes;
using test::TempDir;
using test::write_file;

// Runs f, expects a DataError at `offset` whose message mentions `text`.
template <class F>
void expect_data_error(F f, int64_t offset, const std::string& text) {
  try {
    f();
    FAIL() << "no DataError; expected one at offset " << offset << " about '" << text << "'";
  } catch (const DataError& e) {
    EXPECT_EQ(e.offset(), offset) << e.what();
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
    if (offset >= 0) {
      EXPECT_NE(std::string(e.what()).find(std::to_string(offset)), std::string::npos) << e.what();
    }
  }
}

class IdxTest : public ::testing::TestWithParam<bool> {
 protected:
  bool gz() const { return GetParam(); }
  std::string path(const std::string& base) const {
    return (dir_.path / (base + (gz() ? ".gz" : ""))).string();
  }
  std::string write(const std::string& base, const std::vector<uint8_t>& bytes) const {
    std::string p = path(base);
    write_file(p, bytes, gz());
    return p;
  }
  TempDir dir_;
};

TEST_P(IdxTest, RoundTrip) {
  std::vector<uint8_t> data(3 * 4 * 5);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 7);
  std::string p = write("a", idx_bytes(0x08, {3, 4, 5}, data));
  IdxArray a = read_idx(p);
  EXPECT_EQ(a.type, 0x08);
  EXPECT_EQ(a.dims, (std::vector<int64_t>{3, 4, 5}));
  EXPECT_EQ(a.bytes, data);
}

TEST_P(IdxTest, OneDimensionAndFourDimensions) {
  std::string p1 = write("one", idx_bytes(0x08, {300}, std::vector<uint8_t>(300, 9)));
  EXPECT_EQ(read_idx(p1).bytes.size(), 300u);
  std::string p4 = write("four", idx_bytes(0x08, {2, 1, 3, 2}, std::vector<uint8_t>(12, 1)));
  EXPECT_EQ(read_idx(p4).dims, (std::vector<int64_t>{2, 1, 3, 2}));
}

TEST_P(IdxTest, LargeDimensionsAreBigEndian) {
  std::string p = write("big", idx_bytes(0x08, {70000}, std::vector<uint8_t>(70000, 3)));
  EXPECT_EQ(read_idx(p).dims, (std::vector<int64_t>{70000}));
}

TEST_P(IdxTest, TruncatedData) {
  // header 4 + 3*4 = 16 bytes, data 24 bytes, only 7 present: ends at byte 23.
  auto bytes = idx_bytes(0x08, {2, 3, 4}, std::vector<uint8_t>(24, 1));
  bytes.resize(16 + 7);
  std::string p = write("t", bytes);
  expect_data_error([&] { read_idx(p); }, 23, "truncated");
}

TEST_P(IdxTest, TruncatedHeader) {
  auto bytes = idx_bytes(0x08, {2, 3, 4}, {});
  bytes.resize(10);  // ends inside the second dimension, at byte 10
  std::string p = write("h", bytes);
  expect_data_error([&] { read_idx(p); }, 10, "dimension sizes");
}

TEST_P(IdxTest, EmptyFile) {
  std::string p = write("e", {});
  expect_data_error([&] { read_idx(p); }, 0, "header");
}

TEST_P(IdxTest, BadMagic) {
  auto bytes = idx_bytes(0x08, {4}, std::vector<uint8_t>(4, 0));
  bytes[1] = 0x42;
  std::string p = write("m", bytes);
  expect_data_error([&] { read_idx(p); }, 1, "bad magic");
}

TEST_P(IdxTest, UnsupportedType) {
  std::string p = write("f", idx_bytes(0x0D, {1}, std::vector<uint8_t>(4, 0)));
  expect_data_error([&] { read_idx(p); }, 2, "float32");
  std::string q = write("u", idx_bytes(0x05, {1}, std::vector<uint8_t>(1, 0)));
  expect_data_error([&] { read_idx(q); }, 2, "unknown element type 0x05");
}

TEST_P(IdxTest, BadRank) {
  std::string p = write("r0", idx_bytes(0x08, {}, {}));
  expect_data_error([&] { read_idx(p); }, 3, "dimensions is 0");
  auto five = idx_bytes(0x08, {1, 1, 1, 1}, {1});
  five[3] = 5;
  std::string q = write("r5", five);
  expect_data_error([&] { read_idx(q); }, 3, "dimensions is 5");
}

TEST_P(IdxTest, ZeroDimension) {
  std::string p = write("z", idx_bytes(0x08, {3, 0, 2}, {}));
  expect_data_error([&] { read_idx(p); }, 8, "dimension 1 is 0");
}

TEST_P(IdxTest, TrailingBytes) {
  auto bytes = idx_bytes(0x08, {2, 2}, {1, 2, 3, 4});
  bytes.push_back(0xEE);
  bytes.push_back(0xEE);
  std::string p = write("x", bytes);
  expect_data_error([&] { read_idx(p); }, 12 + 4, "trailing bytes");
}

TEST_P(IdxTest, HugeDimensionsOnShortFileDoNotAllocate) {
  std::string p = write("huge", idx_bytes(0x08, {60000, 60000}, {1, 2, 3}));
  expect_data_error([&] { read_idx(p); }, 4 + 8 + 3, "truncated");
}

TEST_P(IdxTest, DimensionProductThatWouldOverflowIsRefused) {
  // 2^31 * 2^31 * 4 wraps a 64-bit product to 0: it must be refused at the
  // dimension that takes the size past the limit, not read as empty data.
  std::string p = write("wrap", idx_bytes(0x08, {0x80000000u, 0x80000000u, 4}, {}));
  expect_data_error([&] { read_idx(p); }, 8, "data size exceeds");
  std::string q = write("max", idx_bytes(0x08, {0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu}, {}));
  expect_data_error([&] { read_idx(q); }, 8, "data size exceeds");
}

INSTANTIATE_TEST_SUITE_P(GzipAndRaw, IdxTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "gzip" : "raw"; });

TEST(Idx, CorruptGzip) {
  TempDir dir;
  // A valid gzip header followed by a deflate block of the reserved type 3.
  std::vector<uint8_t> bytes = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3, 0xFF, 0xFF, 0xFF, 0xFF};
  std::string p = (dir.path / "c.gz").string();
  write_file(p, bytes, false);
  expect_data_error([&] { read_idx(p); }, 0, "corrupt gzip");
}

TEST(Idx, CorruptGzipMidStream) {
  TempDir dir;
  std::vector<uint8_t> data(20000);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>((i * 2654435761u) >> 13);
  std::string p = (dir.path / "mid.gz").string();
  write_file(p, idx_bytes(0x08, {20000}, data), true);
  // Cut the compressed file in half: zlib reports an unexpected end of stream.
  auto gz = test::read_file(p);
  gz.resize(gz.size() / 2);
  write_file(p, gz, false);
  try {
    read_idx(p);
    FAIL() << "no DataError";
  } catch (const DataError& e) {
    EXPECT_GE(e.offset(), 0) << e.what();
    EXPECT_LT(e.offset(), 8 + 20000) << e.what();
    EXPECT_NE(std::string(e.what()).find("gzip"), std::string::npos) << e.what();
  }
}

TEST(Idx, GzNameWithoutGzipContent) {
  TempDir dir;
  std::string p = (dir.path / "plain.gz").string();
  write_file(p, idx_bytes(0x08, {2}, {1, 2}), false);
  expect_data_error([&] { read_idx(p); }, 0, "not a gzip file");
}

TEST(Idx, GzipContentWithoutGzName) {
  TempDir dir;
  std::string p = (dir.path / "packed").string();
  write_file(p, idx_bytes(0x08, {2}, {1, 2}), true);
  EXPECT_EQ(read_idx(p).bytes, (std::vector<uint8_t>{1, 2}));
}

TEST(Idx, DirectoryIsNotAFile) {
  TempDir dir;
  expect_data_error([&] { read_idx(dir.path.string()); }, -1, "is a directory");
}

TEST(Idx, MissingFile) {
  TempDir dir;
  std::string p = (dir.path / "nope-idx1-ubyte.gz").string();
  expect_data_error([&] { read_idx(p); }, -1, "no such file");
}

}  // namespace
}  // namespace dnnlab::data
