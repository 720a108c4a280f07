// Shards (src/data/shard.hpp): a dataset encoded and decoded gives load()'s
// floats bit for bit, U8 with a lut or F32; malformed shards are DataErrors
// naming the tensor or key and the byte offset.
#include "data/shard.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "data/normalize.hpp"
#include "data_test_util.hpp"
#include "nn/safetensors.hpp"

namespace dnnlab::data {
namespace {

using test::idx_bytes;
using test::TempDir;
using test::write_file;

// A small MNIST-shaped IDX dataset: n_train + n_test images of varied bytes.
void write_fake_idx(const std::filesystem::path& dir, uint32_t n_train, uint32_t n_test) {
  auto images = [](uint32_t n, uint32_t seed) {
    std::vector<uint8_t> b(static_cast<size_t>(n) * 784);
    for (size_t i = 0; i < b.size(); ++i)
      b[i] = static_cast<uint8_t>((i * 2654435761u + seed) >> 13);
    return idx_bytes(0x08, {n, 28, 28}, b);
  };
  auto labels = [](uint32_t n, uint32_t seed) {
    std::vector<uint8_t> b(n);
    for (uint32_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>((i * 7 + seed) % 10);
    return idx_bytes(0x08, {n}, b);
  };
  write_file((dir / "train-images-idx3-ubyte.gz").string(), images(n_train, 1), true);
  write_file((dir / "train-labels-idx1-ubyte.gz").string(), labels(n_train, 1), true);
  write_file((dir / "t10k-images-idx3-ubyte.gz").string(), images(n_test, 2), true);
  write_file((dir / "t10k-labels-idx1-ubyte.gz").string(), labels(n_test, 2), true);
}

void expect_same_split(const Split& a, const Split& b, const char* what) {
  SCOPED_TRACE(what);
  ASSERT_EQ(a.x.shape(), b.x.shape());
  ASSERT_EQ(a.y, b.y);
  if (a.x.numel()) {
    EXPECT_EQ(0, std::memcmp(a.x.data(), b.x.data(), sizeof(float) * a.x.numel()))
        << "floats differ";
  }
}

void expect_same(const Dataset& a, const Dataset& b) {
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.num_classes, b.num_classes);
  EXPECT_EQ(a.sample_shape, b.sample_shape);
  EXPECT_EQ(a.sha256, b.sha256);
  EXPECT_EQ(a.normalize, b.normalize);
  expect_same_split(a.train, b.train, "train");
  expect_same_split(a.val, b.val, "val");
  expect_same_split(a.test, b.test, "test");
}

TEST(Shard, SyntheticRoundTripIsF32AndBitIdentical) {
  LoadOptions o;
  o.name = "synthetic";
  o.limit_train = 64;
  o.validation = 16;
  o.keep_raw = true;  // synthetic data has no bytes: the shard is F32 anyway
  Dataset ds = load(o);
  EXPECT_TRUE(ds.lut.empty());
  const std::string bytes = encode_shard(ds);
  nn::SafetensorsFile f = nn::read_safetensors(bytes);
  EXPECT_EQ(f.tensors.at("train_x").dtype, "F32");
  EXPECT_EQ(f.tensors.at("train_x").shape, (std::vector<int64_t>{64, 784}));
  EXPECT_EQ(f.tensors.at("val_y").dtype, "U8");
  EXPECT_EQ(f.tensors.count("lut"), 0u);
  EXPECT_EQ(f.metadata.at("format"), "dnnlab-shard");
  EXPECT_EQ(f.metadata.at("version"), "1");
  EXPECT_EQ(f.metadata.at("dataset"), "synthetic");
  EXPECT_EQ(f.metadata.at("classes"), "10");
  EXPECT_EQ(f.metadata.at("sample_shape"), "784");
  EXPECT_EQ(f.metadata.at("normalize"), "none");
  EXPECT_EQ(f.metadata.at("dataset_sha256"), "synthetic-v1");
  Dataset back = decode_shard(bytes);
  expect_same(ds, back);
  EXPECT_EQ(encode_shard(back), bytes);  // stable: the same bytes again
}

TEST(Shard, IdxRoundTripIsU8WithLutAndBitIdentical) {
  TempDir d;
  write_fake_idx(d.path, 50, 12);
  for (const char* norm : {"standard", "unit"}) {
    SCOPED_TRACE(norm);
    LoadOptions o;
    o.dir = d.path.string();
    o.validation = 10;
    o.normalize = norm;
    Dataset plain = load(o);
    o.keep_raw = true;
    Dataset ds = load(o);
    expect_same(plain, ds);  // keeping the bytes changes no float
    ASSERT_EQ(ds.lut.size(), 256u);
    ASSERT_EQ(ds.train.raw.size(), 40u * 784);
    EXPECT_TRUE(plain.train.raw.empty());
    for (size_t i = 0; i < ds.train.raw.size(); ++i)
      ASSERT_EQ(ds.train.x[static_cast<int64_t>(i)], ds.lut[ds.train.raw[i]]);

    const std::string bytes = encode_shard(ds);
    nn::SafetensorsFile f = nn::read_safetensors(bytes);
    EXPECT_EQ(f.tensors.at("train_x").dtype, "U8");
    EXPECT_EQ(f.tensors.at("test_x").shape, (std::vector<int64_t>{12, 784}));
    EXPECT_EQ(f.tensors.at("lut").shape, (std::vector<int64_t>{256}));
    EXPECT_EQ(f.tensors.at("lut").offset % 4, 0);  // F32 data can be viewed in place
    EXPECT_EQ(f.metadata.at("normalize"), norm);
    EXPECT_EQ(f.metadata.at("dataset"), "fashion-mnist");
    Dataset back = decode_shard(bytes, "s.safetensors", /*keep_raw=*/true);
    expect_same(plain, back);
    EXPECT_EQ(back.lut, ds.lut);
    EXPECT_EQ(back.val.raw, ds.val.raw);
    EXPECT_EQ(encode_shard(back), bytes);

    // Without the bytes the same data goes out as F32, and still round-trips.
    Dataset no_raw = plain;
    const std::string f32 = encode_shard(no_raw);
    EXPECT_EQ(nn::read_safetensors(f32).tensors.at("train_x").dtype, "F32");
    expect_same(plain, decode_shard(f32));
  }
}

TEST(Shard, EmptyValidationSplit) {
  LoadOptions o;
  o.name = "synthetic";
  o.limit_train = 8;
  o.validation = 0;
  Dataset ds = load(o);
  Dataset back = decode_shard(encode_shard(ds));
  EXPECT_EQ(back.val.size(), 0);
  EXPECT_EQ(back.val.x.shape(), nn::Shape({0, 784}));
  expect_same(ds, back);
}

TEST(RealData, FashionMnistShardRoundTrip) {
  const std::string dir = "/usr/share/datasets/fashion-mnist";
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    if (std::getenv("CI")) FAIL() << dir << " not installed (under CI this test may not skip)";
    GTEST_SKIP() << dir << " not installed";
  }
  LoadOptions o;
  o.dir = dir;
  o.keep_raw = true;
  Dataset ds = load(o);
  const std::string bytes = encode_shard(ds);
  // 70000 * (784 + 1) bytes of pixels and labels, the lut and a header.
  EXPECT_LT(bytes.size(), 70000u * 785 + 4096);
  std::printf("fashion-mnist shard: %zu bytes\n", bytes.size());
  o.keep_raw = false;
  expect_same(load(o), decode_shard(bytes));
}

// A valid tiny U8 shard built from parts, which each test then breaks.
struct Parts {
  std::map<std::string, std::string> meta = {
      {"format", "dnnlab-shard"}, {"version", "1"},      {"dataset", "tiny"},      {"classes", "3"},
      {"sample_shape", "2,2"},    {"normalize", "unit"}, {"dataset_sha256", "abc"}};
  std::vector<uint8_t> x = {0, 1, 2, 3, 255, 254, 253, 252};  // 2 samples of 2x2
  std::vector<uint8_t> y = {0, 2};
  std::vector<float> lut = normalization_lut(1.0f / 255, 0);
  std::vector<nn::SafetensorsInput> tensors() const {
    std::vector<nn::SafetensorsInput> t;
    for (const char* s : {"train", "val", "test"}) {
      t.push_back({std::string(s) + "_x", "U8", {2, 4}, nn::bytes_of(x)});
      t.push_back({std::string(s) + "_y", "U8", {2}, nn::bytes_of(y)});
    }
    t.push_back({"lut", "F32", {256}, nn::bytes_of(lut)});
    return t;
  }
  std::string bytes() const { return nn::write_safetensors(tensors(), meta); }
};

// The DataError decode_shard throws for `bytes`; fails the test if none.
DataError decode_error(const std::string& bytes) {
  try {
    decode_shard(bytes, "bad.safetensors");
  } catch (const DataError& e) {
    return e;
  }
  ADD_FAILURE() << "no DataError";
  return DataError("", -1, "");
}

TEST(Shard, TinyValidShardDecodes) {
  Dataset ds = decode_shard(Parts().bytes());
  EXPECT_EQ(ds.sample_shape, nn::Shape({2, 2}));
  EXPECT_EQ(ds.train.x.shape(), nn::Shape({2, 2, 2}));
  EXPECT_EQ(ds.num_classes, 3);
  EXPECT_EQ(ds.test.y, (std::vector<int32_t>{0, 2}));
  EXPECT_EQ(ds.val.x[4], 1.0f);
  EXPECT_EQ(ds.val.x[5], 254 * (1.0f / 255));
}

TEST(Shard, MalformedShardsNameTheProblem) {
  const std::string good = Parts().bytes();
  {
    DataError e = decode_error(good.substr(0, good.size() - 3));
    EXPECT_NE(std::string(e.what()).find("bad.safetensors"), std::string::npos) << e.what();
    EXPECT_GE(e.offset(), 0);
  }
  EXPECT_THROW(decode_shard(good.substr(0, 5)), DataError);
  {
    Parts p;
    p.meta["format"] = "something-else";
    EXPECT_NE(std::string(decode_error(p.bytes()).what()).find("format"), std::string::npos);
  }
  {
    Parts p;
    p.meta["version"] = "2";
    EXPECT_NE(std::string(decode_error(p.bytes()).what()).find("version 2"), std::string::npos);
  }
  {
    Parts p;
    p.meta.erase("classes");
    EXPECT_NE(std::string(decode_error(p.bytes()).what()).find("'classes'"), std::string::npos);
  }
  {
    Parts p;
    p.meta["sample_shape"] = "2,x";
    EXPECT_NE(std::string(decode_error(p.bytes()).what()).find("sample_shape"), std::string::npos);
  }
  {
    Parts p;
    p.meta["sample_shape"] = "5";  // x holds 4 features per sample
    const std::string msg = decode_error(p.bytes()).what();
    EXPECT_NE(msg.find("'train_x' has shape [2,4], expected [2,5]"), std::string::npos) << msg;
  }
  {
    Parts p;
    p.y = {0, 3};  // classes = 3
    const std::string bytes = p.bytes();
    DataError e = decode_error(bytes);
    const nn::SafetensorsFile parsed = nn::read_safetensors(bytes);
    const nn::SafetensorsTensor& y = parsed.tensors.at("train_y");  // not of a temporary
    EXPECT_EQ(e.offset(), y.offset + 1);
    EXPECT_NE(std::string(e.what()).find("label 3 of sample 1"), std::string::npos) << e.what();
  }
  {
    Parts p;
    p.lut[7] = std::numeric_limits<float>::quiet_NaN();
    const std::string bytes = p.bytes();
    DataError e = decode_error(bytes);
    EXPECT_EQ(e.offset(), nn::read_safetensors(bytes).tensors.at("lut").offset + 28);
    EXPECT_NE(std::string(e.what()).find("lut entry 7"), std::string::npos) << e.what();
  }
  {
    Parts p;
    auto t = p.tensors();
    t.pop_back();  // no lut
    const std::string msg = decode_error(nn::write_safetensors(t, p.meta)).what();
    EXPECT_NE(msg.find("'lut' is missing"), std::string::npos) << msg;
  }
  {
    Parts p;
    auto t = p.tensors();
    t.erase(t.begin() + 3);  // val_y
    const std::string msg = decode_error(nn::write_safetensors(t, p.meta)).what();
    EXPECT_NE(msg.find("'val_y' is missing"), std::string::npos) << msg;
  }
  {
    Parts p;
    auto t = p.tensors();
    t.push_back({"extra", "U8", {1}, nn::bytes_of(p.y).substr(0, 1)});
    const std::string msg = decode_error(nn::write_safetensors(t, p.meta)).what();
    EXPECT_NE(msg.find("unexpected tensor 'extra'"), std::string::npos) << msg;
  }
  {
    Parts p;
    auto t = p.tensors();
    t[4].shape = {1, 8};  // test_x: 1 sample of 8, labels for 2
    const std::string msg = decode_error(nn::write_safetensors(t, p.meta)).what();
    EXPECT_NE(msg.find("'test_x' has shape [1,8], expected [2,4]"), std::string::npos) << msg;
  }
  {
    // F32 pixels beside U8 ones.
    Parts p;
    std::vector<float> xf(8, 0.5f);
    auto t = p.tensors();
    t[2] = {"val_x", "F32", {2, 4}, nn::bytes_of(xf)};
    const std::string msg = decode_error(nn::write_safetensors(t, p.meta)).what();
    EXPECT_NE(msg.find("'val_x' is F32 but train_x is U8"), std::string::npos) << msg;
  }
  {
    // An F32 shard with a non-finite value.
    Parts p;
    std::vector<float> xf(8, 0.5f);
    xf[5] = std::numeric_limits<float>::infinity();
    std::vector<nn::SafetensorsInput> t;
    for (const char* s : {"train", "val", "test"}) {
      t.push_back({std::string(s) + "_x", "F32", {2, 4}, nn::bytes_of(xf)});
      t.push_back({std::string(s) + "_y", "U8", {2}, nn::bytes_of(p.y)});
    }
    const std::string bytes = nn::write_safetensors(t, p.meta);
    DataError e = decode_error(bytes);
    EXPECT_EQ(e.offset(), nn::read_safetensors(bytes).tensors.at("train_x").offset + 20);
  }
}

TEST(Shard, EncodeRejectsWhatAShardCannotHold) {
  LoadOptions o;
  o.name = "synthetic";
  o.limit_train = 4;
  o.validation = 2;
  Dataset ds = load(o);
  ds.train.y[1] = 12;
  EXPECT_THROW(encode_shard(ds), DataError);
  ds.train.y[1] = 0;
  ds.num_classes = 300;
  EXPECT_THROW(encode_shard(ds), DataError);
}

}  // namespace
}  // namespace dnnlab::data
