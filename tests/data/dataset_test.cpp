// load(), resolve_dir() and shuffle_indices() on small synthetic MNIST-shaped
// datasets, plus one check against the real Fashion-MNIST when installed.
#include "data/dataset.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <numeric>
#include <set>

#include "data_test_util.hpp"

namespace dnnlab::data {
namespace {

using test::idx_bytes;
using test::TempDir;
using test::write_file;

constexpr uint32_t kPixels = 28 * 28;

// Pixel bytes of sample i: a function of i alone, so any row can be traced
// back to its source sample.
uint8_t pixel(uint32_t sample, uint32_t k) {
  return static_cast<uint8_t>((sample * 131u + k * 7u + (k * k) % 13u) & 0xFF);
}

struct Synth {
  uint32_t n_train = 40, n_test = 12;
  bool gz = true;
  int bad_label_at = -1;   // train label index to set to 10
  int labels_missing = 0;  // train labels written short of images
};

void write_dataset(const std::filesystem::path& dir, const Synth& s) {
  std::filesystem::create_directories(dir);
  auto images = [&](uint32_t n, uint32_t offset) {
    std::vector<uint8_t> b(static_cast<size_t>(n) * kPixels);
    for (uint32_t i = 0; i < n; ++i)
      for (uint32_t k = 0; k < kPixels; ++k) b[i * kPixels + k] = pixel(offset + i, k);
    return idx_bytes(0x08, {n, 28, 28}, b);
  };
  auto labels = [&](uint32_t n, uint32_t offset) {
    std::vector<uint8_t> b(n);
    for (uint32_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>((offset + i) % 10);
    return b;
  };
  std::string ext = s.gz ? ".gz" : "";
  write_file((dir / ("train-images-idx3-ubyte" + ext)).string(), images(s.n_train, 0), s.gz);
  auto ytr = labels(s.n_train - s.labels_missing, 0);
  if (s.bad_label_at >= 0) ytr[s.bad_label_at] = 10;
  write_file((dir / ("train-labels-idx1-ubyte" + ext)).string(),
             idx_bytes(0x08, {static_cast<uint32_t>(ytr.size())}, ytr), s.gz);
  write_file((dir / ("t10k-images-idx3-ubyte" + ext)).string(), images(s.n_test, 1000), s.gz);
  write_file((dir / ("t10k-labels-idx1-ubyte" + ext)).string(),
             idx_bytes(0x08, {s.n_test}, labels(s.n_test, 1000)), s.gz);
}

LoadOptions options_for(const TempDir& d, int64_t validation = 10) {
  LoadOptions o;
  o.dir = d.path.string();
  o.validation = validation;
  return o;
}

// Which source sample a normalized row came from, via its first pixels.
int64_t source_of(const float* row, float scale, float bias, uint32_t offset, uint32_t n) {
  for (uint32_t i = 0; i < n; ++i) {
    bool same = true;
    for (uint32_t k = 0; k < 16 && same; ++k)
      same = std::fabs(row[k] - (pixel(offset + i, k) * scale + bias)) < 1e-4f;
    if (same) return i;
  }
  return -1;
}

TEST(Dataset, LoadsSyntheticUnit) {
  for (bool gz : {true, false}) {
    TempDir d;
    write_dataset(d.path, Synth{.gz = gz});
    LoadOptions o = options_for(d);
    o.normalize = "unit";
    Dataset ds = load(o);
    EXPECT_EQ(ds.name, "fashion-mnist");
    EXPECT_EQ(ds.dir, d.path.string());
    EXPECT_EQ(ds.num_classes, 10);
    EXPECT_EQ(ds.class_names.size(), 10u);
    EXPECT_EQ(ds.class_names[9], "Ankle boot");
    EXPECT_EQ(ds.sample_shape, nn::Shape({1, 28, 28}));  // images keep their shape
    EXPECT_EQ(ds.train.size(), 30);
    EXPECT_EQ(ds.val.size(), 10);
    EXPECT_EQ(ds.test.size(), 12);
    EXPECT_EQ(ds.train.x.shape(), nn::Shape({30, 1, 28, 28}));
    EXPECT_EQ(ds.val.x.shape(), nn::Shape({10, 1, 28, 28}));
    EXPECT_EQ(ds.test.x.shape(), nn::Shape({12, 1, 28, 28}));
    // Test keeps file order; every value is pixel/255; labels follow their rows.
    for (uint32_t i = 0; i < 12; ++i) {
      EXPECT_EQ(ds.test.y[i], static_cast<int32_t>((1000 + i) % 10));
      for (uint32_t k = 0; k < kPixels; k += 97)
        EXPECT_FLOAT_EQ(ds.test.x[i * 784 + k], pixel(1000 + i, k) / 255.0f);
    }
    for (int64_t r = 0; r < ds.train.size(); ++r) {
      int64_t src = source_of(ds.train.x.data() + r * 784, 1 / 255.0f, 0, 0, 40);
      ASSERT_GE(src, 0);
      EXPECT_EQ(ds.train.y[r], src % 10);
    }
    EXPECT_EQ(ds.sha256.size(), 64u);
  }
}

TEST(Dataset, ValidationSplitIsDeterministicAndDisjoint) {
  TempDir d;
  write_dataset(d.path, Synth{});
  LoadOptions o = options_for(d, 10);
  o.normalize = "unit";
  Dataset a = load(o), b = load(o);
  std::set<int64_t> train_src, val_src;
  for (int64_t r = 0; r < a.train.size(); ++r)
    train_src.insert(source_of(a.train.x.data() + r * 784, 1 / 255.0f, 0, 0, 40));
  for (int64_t r = 0; r < a.val.size(); ++r)
    val_src.insert(source_of(a.val.x.data() + r * 784, 1 / 255.0f, 0, 0, 40));
  EXPECT_EQ(train_src.size(), 30u);
  EXPECT_EQ(val_src.size(), 10u);
  EXPECT_FALSE(train_src.count(-1) || val_src.count(-1));
  for (int64_t v : val_src) EXPECT_EQ(train_src.count(v), 0u) << "sample " << v << " in both";
  // Same options, same split, bit for bit.
  EXPECT_EQ(a.val.y, b.val.y);
  EXPECT_EQ(0, std::memcmp(a.val.x.data(), b.val.x.data(), sizeof(float) * a.val.x.numel()));
  EXPECT_EQ(0, std::memcmp(a.train.x.data(), b.train.x.data(), sizeof(float) * a.train.x.numel()));
  // The validation set is the tail of shuffle_indices(0..39, split_seed).
  std::vector<int64_t> order(40);
  std::iota(order.begin(), order.end(), 0);
  shuffle_indices(order, o.split_seed);
  EXPECT_EQ(val_src, std::set<int64_t>(order.begin() + 30, order.end()));
  // limit_train shrinks train and leaves val alone.
  o.limit_train = 7;
  Dataset c = load(o);
  EXPECT_EQ(c.train.size(), 7);
  EXPECT_EQ(c.val.y, a.val.y);
  EXPECT_EQ(0, std::memcmp(c.train.x.data(), a.train.x.data(), sizeof(float) * 7 * 784));
  // Another seed, another split.
  o.limit_train = 0;
  o.split_seed = 1;
  Dataset e = load(o);
  std::set<int64_t> val_e;
  for (int64_t r = 0; r < e.val.size(); ++r)
    val_e.insert(source_of(e.val.x.data() + r * 784, 1 / 255.0f, 0, 0, 40));
  EXPECT_NE(val_e, val_src);
}

TEST(Dataset, StandardNormalizationUsesTrainStatistics) {
  TempDir d;
  write_dataset(d.path, Synth{});
  LoadOptions o = options_for(d, 10);
  Dataset ds = load(o);
  auto stats = [](const nn::Tensor& t) {
    double s = 0, s2 = 0;
    for (int64_t i = 0; i < t.numel(); ++i) s += t[i];
    double m = s / t.numel();
    for (int64_t i = 0; i < t.numel(); ++i) s2 += (t[i] - m) * (t[i] - m);
    return std::pair{m, std::sqrt(s2 / t.numel())};
  };
  auto [m, sd] = stats(ds.train.x);
  EXPECT_NEAR(m, 0.0, 1e-5);
  EXPECT_NEAR(sd, 1.0, 1e-5);
  // Recover the affine map from the train split and check val/test use it too.
  o.normalize = "unit";
  Dataset u = load(o);
  auto [um, usd] = stats(u.train.x);
  for (const auto* pair : {&ds.val, &ds.test}) {
    const Split& s = *pair;
    const Split& us = pair == &ds.val ? u.val : u.test;
    for (int64_t i = 0; i < s.x.numel(); i += 101)
      EXPECT_NEAR(s.x[i], (us.x[i] - um) / usd, 1e-4) << i;
  }
}

TEST(Dataset, Sha256OfRawFilesIsStable) {
  TempDir d;
  write_dataset(d.path, Synth{.gz = false});
  Dataset ds = load(options_for(d));
  // Golden: sha256 of the four raw files above, concatenated in the fixed order.
  EXPECT_EQ(ds.sha256, "a8925a39749c4ee57783563ce895567c7bb4e3c47880b02193c9f7972f9fac39");
  // Any change to a file changes the hash.
  write_file((d.path / "t10k-labels-idx1-ubyte").string(),
             idx_bytes(0x08, {12}, std::vector<uint8_t>(12, 1)), false);
  EXPECT_NE(load(options_for(d)).sha256, ds.sha256);
}

TEST(Dataset, LabelOutOfRange) {
  TempDir d;
  write_dataset(d.path, Synth{.bad_label_at = 5});
  try {
    load(options_for(d));
    FAIL() << "no DataError";
  } catch (const DataError& e) {
    EXPECT_EQ(e.offset(), 8 + 5) << e.what();
    EXPECT_NE(e.file().find("train-labels"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("label 10"), std::string::npos) << e.what();
  }
}

TEST(Dataset, CountMismatch) {
  TempDir d;
  write_dataset(d.path, Synth{.labels_missing = 3});
  try {
    load(options_for(d));
    FAIL() << "no DataError";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("37 labels but 40 images"), std::string::npos) << e.what();
  }
}

TEST(Dataset, WrongImageSize) {
  TempDir d;
  write_dataset(d.path, Synth{});
  write_file((d.path / "t10k-images-idx3-ubyte.gz").string(),
             idx_bytes(0x08, {12, 14, 56}, std::vector<uint8_t>(12 * 14 * 56)), true);
  try {
    load(options_for(d));
    FAIL() << "no DataError";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("28x28, found 14x56"), std::string::npos) << e.what();
  }
}

TEST(Dataset, BadOptions) {
  TempDir d;
  write_dataset(d.path, Synth{});
  LoadOptions o = options_for(d, 40);
  EXPECT_THROW(load(o), DataError);  // nothing left to train on
  o.validation = 5;
  o.normalize = "minmax";
  EXPECT_THROW(load(o), DataError);
  o.normalize = "unit";
  o.name = "cifar10";
  EXPECT_THROW(load(o), DataError);
  o.name = "mnist";
  EXPECT_EQ(load(o).class_names[3], "3");
}

TEST(Dataset, ValidationZero) {
  TempDir d;
  write_dataset(d.path, Synth{});
  Dataset ds = load(options_for(d, 0));
  EXPECT_EQ(ds.train.size(), 40);
  EXPECT_EQ(ds.val.size(), 0);
}

TEST(ResolveDir, MissingDirectoryExplainsHowToFix) {
  TempDir d;
  std::string missing = (d.path / "not-here").string();
  try {
    resolve_dir("fashion-mnist", missing);
    FAIL() << "no DataError";
  } catch (const DataError& e) {
    std::string m = e.what();
    EXPECT_EQ(e.offset(), -1);
    EXPECT_NE(m.find(missing), std::string::npos) << m;
    EXPECT_NE(m.find("DNNLAB_DATA_DIR"), std::string::npos) << m;
    EXPECT_NE(m.find("--data"), std::string::npos) << m;
    EXPECT_NE(m.find("apt-get install dataset-fashion-mnist"), std::string::npos) << m;
    EXPECT_NE(m.find("train-images-idx3-ubyte"), std::string::npos) << m;
  }
}

TEST(ResolveDir, MissingFilesAreListed) {
  TempDir d;
  write_dataset(d.path, Synth{});
  std::filesystem::remove(d.path / "t10k-labels-idx1-ubyte.gz");
  try {
    resolve_dir("fashion-mnist", d.path.string());
    FAIL() << "no DataError";
  } catch (const DataError& e) {
    std::string m = e.what();
    const std::string listed = m.substr(m.find("missing:"));
    EXPECT_NE(listed.find("t10k-labels-idx1-ubyte"), std::string::npos) << m;
    EXPECT_EQ(listed.find("train-images"), std::string::npos) << m;
  }
}

TEST(ResolveDir, EnvironmentVariable) {
  TempDir d;
  write_dataset(d.path / "fashion-mnist", Synth{});
  const char* old = std::getenv("DNNLAB_DATA_DIR");
  std::string saved = old ? old : "";
  ::setenv("DNNLAB_DATA_DIR", d.path.c_str(), 1);
  std::string got = resolve_dir("fashion-mnist", "");
  if (old)
    ::setenv("DNNLAB_DATA_DIR", saved.c_str(), 1);
  else
    ::unsetenv("DNNLAB_DATA_DIR");
  EXPECT_EQ(got, (d.path / "fashion-mnist").string());
  // An explicit directory wins over the variable.
  EXPECT_EQ(resolve_dir("fashion-mnist", (d.path / "fashion-mnist").string()),
            (d.path / "fashion-mnist").string());
}

TEST(Shuffle, GoldenPermutationForSeed42) {
  std::vector<int64_t> idx(10);
  std::iota(idx.begin(), idx.end(), 0);
  shuffle_indices(idx, 42);
  // Computed once from this implementation; guards cross-platform determinism.
  EXPECT_EQ(idx, (std::vector<int64_t>{0, 9, 5, 8, 6, 4, 7, 2, 1, 3}));
}

TEST(Shuffle, IsAPermutationAndDependsOnSeed) {
  std::vector<int64_t> a(1000), b(1000);
  std::iota(a.begin(), a.end(), 0);
  std::iota(b.begin(), b.end(), 0);
  shuffle_indices(a, 7);
  shuffle_indices(b, 8);
  EXPECT_NE(a, b);
  std::vector<int64_t> s = a;
  std::sort(s.begin(), s.end());
  for (int64_t i = 0; i < 1000; ++i) EXPECT_EQ(s[i], i);
  std::vector<int64_t> empty, one{5};
  shuffle_indices(empty, 1);
  shuffle_indices(one, 1);
  EXPECT_EQ(one, std::vector<int64_t>{5});
}

TEST(RealData, FashionMnist) {
  const std::string dir = "/usr/share/datasets/fashion-mnist";
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    if (std::getenv("CI")) FAIL() << dir << " not installed (under CI this test may not skip)";
    GTEST_SKIP() << dir << " not installed";
  }
  LoadOptions o;
  o.dir = dir;
  auto t0 = std::chrono::steady_clock::now();
  Dataset ds = load(o);
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("loaded fashion-mnist in %.3f s, sha256 %s\n", secs, ds.sha256.c_str());
  EXPECT_EQ(ds.train.size(), 55000);
  EXPECT_EQ(ds.val.size(), 5000);
  EXPECT_EQ(ds.test.size(), 10000);
  EXPECT_EQ(ds.sample_shape, nn::Shape({1, 28, 28}));  // images keep their shape
  EXPECT_EQ(ds.train.x.shape(), nn::Shape({55000, 1, 28, 28}));
  EXPECT_EQ(ds.test.x.shape(), nn::Shape({10000, 1, 28, 28}));
  EXPECT_EQ(ds.num_classes, 10);
  EXPECT_EQ(ds.sha256.size(), 64u);
  std::vector<int> counts(10, 0);
  for (int32_t y : ds.test.y) ++counts[y];
  for (int c : counts) EXPECT_EQ(c, 1000);  // Fashion-MNIST's test set is balanced
}

}  // namespace
}  // namespace dnnlab::data
