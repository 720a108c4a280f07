// Data sets by path (data/files.hpp): CSV, IDX, .npy and .npz files through
// load(), with their splits, normalization, hashes and shards; and the
// scikit-learn tables by name.
#include "data/files.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "data/file_bytes.hpp"
#include "data/shard.hpp"
#include "data_test_util.hpp"
#include "npy_test_util.hpp"

namespace dnnlab::data {
namespace {

using test::npy_bytes;
using test::raw_bytes;
using test::TempDir;

std::string write_text(const std::filesystem::path& p, const std::string& text) {
  std::ofstream f(p, std::ios::binary);
  f << text;
  return p.string();
}

std::string fixture(const std::string& name) {
  const char* src = std::getenv("DNNLAB_SOURCE_DIR");
  const std::filesystem::path root = src && *src ? std::filesystem::path(src) / "tests/data"
                                                 : std::filesystem::path(__FILE__).parent_path();
  return (root / "fixtures" / name).string();
}

// 40 rows, 3 features, 2 text classes: feature 0 tells them apart.
std::string table(int rows, bool header) {
  std::string t = header ? "f0,f1,f2,kind\n" : "";
  for (int i = 0; i < rows; ++i)
    t += std::to_string(i % 2 ? 10 + i : -i) + "," + std::to_string(i * 0.5) + ",7," +
         (i % 2 ? "odd" : "even") + "\n";
  return t;
}

std::string error_of(const LoadOptions& o) {
  try {
    load(o);
  } catch (const DataError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no error for " << o.path;
  return "";
}

TEST(Files, CsvByPathSplitsNormalizesAndHashes) {
  TempDir dir;
  LoadOptions o;
  o.path = write_text(dir.path / "t.csv", table(40, true));
  o.test_fraction = 0.25;
  o.validation = 6;
  Dataset ds = load(o);
  EXPECT_EQ(ds.name, "t.csv");
  EXPECT_EQ(ds.sample_shape, nn::Shape{3});
  EXPECT_EQ(ds.num_classes, 2);
  EXPECT_EQ(ds.class_names, (std::vector<std::string>{"even", "odd"}));
  EXPECT_EQ(ds.test.size(), 10);
  EXPECT_EQ(ds.val.size(), 6);
  EXPECT_EQ(ds.train.size(), 24);
  EXPECT_EQ(ds.train.x.shape(), (nn::Shape{24, 3}));
  EXPECT_EQ(ds.sha256, sha256_files({o.path}));
  EXPECT_EQ(ds.normalize, "standard");
  EXPECT_TRUE(ds.lut.empty());
  // Standardized per feature on the train split: mean 0, sd 1; the
  // constant feature only centred.
  for (int j = 0; j < 3; ++j) {
    double sum = 0, sq = 0;
    for (int64_t r = 0; r < 24; ++r) sum += ds.train.x.data()[r * 3 + j];
    for (int64_t r = 0; r < 24; ++r) sq += std::pow(ds.train.x.data()[r * 3 + j] - sum / 24, 2);
    EXPECT_NEAR(sum / 24, 0, 1e-5) << j;
    EXPECT_NEAR(std::sqrt(sq / 24), j == 2 ? 0 : 1, 1e-5) << j;
  }
  // The same files and options: the same splits, bit for bit.
  Dataset again = load(o);
  EXPECT_EQ(0, std::memcmp(again.train.x.data(), ds.train.x.data(), 24 * 3 * 4));
  EXPECT_EQ(again.test.y, ds.test.y);

  // unit: [0, 1] on the train split.
  o.normalize = "unit";
  ds = load(o);
  float lo = 1e9, hi = -1e9;
  for (int64_t i = 0; i < ds.train.x.numel(); ++i) {
    lo = std::min(lo, ds.train.x.data()[i]);
    hi = std::max(hi, ds.train.x.data()[i]);
  }
  EXPECT_EQ(lo, 0.f);
  EXPECT_EQ(hi, 1.f);

  // The shape, classes and samples sample_shape() reports are load()'s.
  SampleShape s = sample_shape(o);
  EXPECT_EQ(s.sample, nn::Shape{3});
  EXPECT_EQ(s.num_classes, 2);
  EXPECT_EQ(s.train_samples, 30);
}

TEST(Files, CsvTestFileAndLabelsByNumber) {
  TempDir dir;
  LoadOptions o;
  o.path = write_text(dir.path / "train.csv", "1,2,0\n3,4,1\n5,6,0\n7,8,1\n");
  o.test_path = write_text(dir.path / "test.csv", "9,9,2\n");
  o.validation = 1;
  Dataset ds = load(o);
  EXPECT_EQ(ds.num_classes, 3);  // labels 0..2 over both files
  EXPECT_EQ(ds.test.size(), 1);
  EXPECT_EQ(ds.test.y, (std::vector<int32_t>{2}));
  EXPECT_EQ(ds.train.size() + ds.val.size(), 4);
  EXPECT_EQ(ds.sha256, sha256_files({o.path, o.test_path}));
  // A test file of another width.
  o.test_path = write_text(dir.path / "bad.csv", "9,9,9,2\n");
  EXPECT_NE(error_of(o).find("test samples are [3] but training samples are [2]"),
            std::string::npos);
}

TEST(Files, CsvDefectsReachTheUserWithLineAndColumn) {
  TempDir dir;
  LoadOptions o;
  o.validation = 0;
  o.path = write_text(dir.path / "t.csv", "a,b,y\n1,2,x\n3,oops,y\n");
  EXPECT_NE(error_of(o).find("t.csv at byte 14: line 3, column 3: 'oops' is not a number"),
            std::string::npos)
      << error_of(o);
  // gzip, read through the same path; a truncated gzip stream is named.
  const std::string gz = (dir.path / "t.csv.gz").string();
  test::write_file(gz, std::vector<uint8_t>{'1', ',', '2', '\n', '3', ',', '4', '\n'}, true);
  o.path = gz;
  EXPECT_EQ(load(o).train.size(), 2);
  std::ifstream in(gz, std::ios::binary);
  std::string packed((std::istreambuf_iterator<char>(in)), {});
  write_text(gz, packed.substr(0, packed.size() - 6));
  EXPECT_NE(error_of(o).find("corrupt gzip stream"), std::string::npos) << error_of(o);
  o.path = (dir.path / "missing.csv").string();
  EXPECT_NE(error_of(o).find("no such file"), std::string::npos);
  o.path = dir.path.string();
  o.format = "csv";
  EXPECT_NE(error_of(o).find("not a regular file"), std::string::npos);
  o.path = (dir.path / "x.dat").string();
  o.format = "";
  EXPECT_NE(error_of(o).find("cannot tell the format"), std::string::npos);
}

TEST(Files, IdxByPath) {
  TempDir dir;
  std::vector<uint8_t> px(5 * 2 * 3), y = {0, 1, 2, 1, 0};
  for (size_t i = 0; i < px.size(); ++i) px[i] = static_cast<uint8_t>(i * 7);
  LoadOptions o;
  o.path = (dir.path / "imgs-idx3-ubyte").string();
  o.labels = (dir.path / "labels-idx1-ubyte.gz").string();
  test::write_file(o.path, test::idx_bytes(0x08, {5, 2, 3}, px), false);
  test::write_file(o.labels, test::idx_bytes(0x08, {5}, y), true);
  o.validation = 1;
  o.keep_raw = true;
  Dataset ds = load(o);
  EXPECT_EQ(ds.sample_shape, (nn::Shape{1, 2, 3}));
  EXPECT_EQ(ds.num_classes, 3);
  EXPECT_EQ(ds.lut.size(), 256u);
  EXPECT_EQ(ds.train.size(), 4);
  EXPECT_EQ(ds.test.size(), 0);
  for (int64_t i = 0; i < ds.train.x.numel(); ++i)
    EXPECT_EQ(ds.train.x.data()[i], ds.lut[ds.train.raw[i]]);
  EXPECT_EQ(ds.sha256, sha256_files({o.path, o.labels}));
  // Labels are required, and must match the images.
  LoadOptions no_labels = o;
  no_labels.labels.clear();
  EXPECT_NE(error_of(no_labels).find("needs `labels`"), std::string::npos);
  test::write_file(o.labels, test::idx_bytes(0x08, {4}, {0, 1, 2, 1}), true);
  EXPECT_NE(error_of(o).find("4 labels but 5 images"), std::string::npos);
}

TEST(Files, NpyByPathFloatAndBytes) {
  TempDir dir;
  LoadOptions o;
  o.path = write_text(dir.path / "x.npy",
                      npy_bytes("<f4", {4, 2, 2}, raw_bytes(std::vector<float>(16, 0.5f))));
  o.labels = write_text(dir.path / "y.npy",
                        npy_bytes("<i8", {4}, raw_bytes(std::vector<int64_t>{0, 1, 0, 1})));
  o.validation = 1;
  Dataset ds = load(o);
  EXPECT_EQ(ds.sample_shape, (nn::Shape{1, 2, 2}));  // [N, H, W] -> one channel
  EXPECT_EQ(ds.num_classes, 2);
  EXPECT_EQ(ds.train.x.data()[0], 0.f);  // a constant feature, centred

  // [N, C, H, W] uint8: through the byte table, like IDX.
  std::string px(2 * 3 * 2 * 2, '\0');
  for (size_t i = 0; i < px.size(); ++i) px[i] = static_cast<char>(i * 10);
  o.path = write_text(dir.path / "x8.npy", npy_bytes("|u1", {2, 3, 2, 2}, px));
  o.labels = write_text(dir.path / "y8.npy", npy_bytes("|u1", {2, 1}, std::string("\x01\x00", 2)));
  ds = load(o);
  EXPECT_EQ(ds.sample_shape, (nn::Shape{3, 2, 2}));
  EXPECT_EQ(ds.lut.size(), 256u);

  // NaN in the features: named by its byte offset, sample and element.
  std::vector<float> v(8, 1.f);
  v[5] = std::nanf("");
  o.path = write_text(dir.path / "nan.npy", npy_bytes("<f4", {4, 2}, raw_bytes(v)));
  o.labels = write_text(dir.path / "y.npy",
                        npy_bytes("<i8", {4}, raw_bytes(std::vector<int64_t>{0, 1, 0, 1})));
  EXPECT_NE(error_of(o).find("nan.npy at byte 148: NaN at sample 2, element 1 (float32)"),
            std::string::npos)
      << error_of(o);
  // Labels that are not class numbers.
  o.path =
      write_text(dir.path / "x.npy", npy_bytes("<f4", {4, 2}, raw_bytes(std::vector<float>(8))));
  o.labels = write_text(dir.path / "y.npy",
                        npy_bytes("<i8", {4}, raw_bytes(std::vector<int64_t>{0, -3, 0, 1})));
  EXPECT_NE(error_of(o).find("y.npy at byte 136: label -3.000000 of sample 1"), std::string::npos)
      << error_of(o);
  o.labels = write_text(dir.path / "y.npy",
                        npy_bytes("<f8", {4}, raw_bytes(std::vector<double>{0, 1.5, 0, 1})));
  EXPECT_NE(error_of(o).find("label 1.500000 of sample 1"), std::string::npos) << error_of(o);
  // Wrong dtype and shape.
  o.path = write_text(dir.path / "x.npy", npy_bytes("<c8", {4, 2}, std::string(64, '\0')));
  EXPECT_NE(error_of(o).find("dtype '<c8' is not supported"), std::string::npos);
  o.path = write_text(dir.path / "x.npy", npy_bytes("<f4", {4}, std::string(16, '\0')));
  EXPECT_NE(error_of(o).find("at least 2 dimensions"), std::string::npos);
}

TEST(Files, NpzFromNumpyWithItsOwnTestSplitAndShards) {
  for (const char* name : {"tiny-compressed.npz", "tiny-stored.npz"}) {
    LoadOptions o;
    o.path = fixture(name);
    o.validation = 2;
    o.keep_raw = true;
    Dataset ds = load(o);
    EXPECT_EQ(ds.sample_shape, (nn::Shape{1, 3, 4}));
    EXPECT_EQ(ds.num_classes, 3);
    EXPECT_EQ(ds.train.size(), 10);
    EXPECT_EQ(ds.test.size(), 4);
    EXPECT_EQ(ds.test.y, (std::vector<int32_t>{2, 1, 0, 1}));
    int64_t sum = 0;
    for (uint8_t b : ds.test.raw) sum += b;
    EXPECT_EQ(sum, 5569);  // numpy's x_test.sum()
    // The browsers' shard: U8 with the table, bit for bit the same floats.
    Dataset back = decode_shard(encode_shard(ds), name);
    ASSERT_EQ(back.train.x.numel(), ds.train.x.numel());
    EXPECT_EQ(0, std::memcmp(back.train.x.data(), ds.train.x.data(), ds.train.x.numel() * 4));
    EXPECT_EQ(back.test.y, ds.test.y);
    o.test_fraction = 0.5;
    EXPECT_NE(error_of(o).find("drop one"), std::string::npos);
  }
}

TEST(Files, CsvShardIsFloat32AndRoundTrips) {
  TempDir dir;
  LoadOptions o;
  o.path = write_text(dir.path / "t.csv", table(20, false));
  o.validation = 4;
  o.test_fraction = 0.2;
  o.keep_raw = true;
  Dataset ds = load(o);
  const std::string bytes = encode_shard(ds);
  EXPECT_NE(bytes.find("\"F32\""), std::string::npos);
  Dataset back = decode_shard(bytes, "s");
  EXPECT_EQ(back.sample_shape, nn::Shape{3});
  EXPECT_EQ(back.num_classes, 2);
  for (const auto& [a, b] :
       {std::pair{&ds.train, &back.train}, {&ds.val, &back.val}, {&ds.test, &back.test}}) {
    ASSERT_EQ(a->size(), b->size());
    EXPECT_EQ(0, std::memcmp(a->x.data(), b->x.data(), a->x.numel() * 4));
    EXPECT_EQ(a->y, b->y);
  }
}

// python3-sklearn's tables by name (scripts/bootstrap.sh installs it).
TEST(Files, ScikitLearnTablesByName) {
  if (!std::filesystem::exists(
          "/usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz"))
    GTEST_SKIP() << "python3-sklearn is not installed";
  struct Want {
    const char* name;
    int64_t features, classes, rows;
    const char* first_class;
  };
  for (const Want& w :
       {Want{"digits", 64, 10, 1797, "0"}, Want{"breast-cancer", 30, 2, 569, "malignant"},
        Want{"wine", 13, 3, 178, "class_0"}, Want{"iris", 4, 3, 150, "setosa"}}) {
    LoadOptions o;
    o.name = w.name;
    o.validation = 10;
    o.test_fraction = 0.2;
    Dataset ds = load(o);
    EXPECT_EQ(ds.name, w.name);
    EXPECT_EQ(ds.sample_shape, nn::Shape{w.features}) << w.name;
    EXPECT_EQ(ds.num_classes, w.classes) << w.name;
    EXPECT_EQ(ds.train.size() + ds.val.size() + ds.test.size(), w.rows) << w.name;
    EXPECT_EQ(ds.test.size(), std::llround(0.2 * w.rows)) << w.name;
    EXPECT_EQ(ds.class_names.at(0), w.first_class) << w.name;
    EXPECT_EQ(ds.sha256.size(), 64u);
    SampleShape s = sample_shape(o);
    EXPECT_EQ(s.train_samples, w.rows - std::llround(0.2 * w.rows)) << w.name;
  }
  // --data <dir> points at a copy (and a missing one says where it looked).
  LoadOptions o;
  o.name = "wine";
  o.dir = "/nonexistent";
  EXPECT_NE(error_of(o).find("apt-get install python3-sklearn"), std::string::npos);
}

}  // namespace
}  // namespace dnnlab::data
