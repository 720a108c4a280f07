// The gateway's ShardCache with a data set given by path: the shard browsers
// fetch is built from the file (F32 for a CSV table), carries its sha256 in
// the provenance, and two specs that differ only in a path key get two shards.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "data/dataset.hpp"
#include "data/shard.hpp"
#include "server/gateway_assets.hpp"

namespace dnnlab::server {
namespace shard_cache_test {

struct CsvFile {
  std::string path;
  explicit CsvFile(const std::string& text)
      : path((std::filesystem::temp_directory_path() /
              ("dnnlab-shard-cache-" + std::to_string(::getpid()) + ".csv"))
                 .string()) {
    std::ofstream(path) << text;
  }
  ~CsvFile() { std::filesystem::remove(path); }
};

TEST(ShardCache, BuildsShardsOfADataSetByPath) {
  std::string text = "a,b,c,kind\n";
  for (int i = 0; i < 50; ++i)
    text += std::to_string(i) + "," + std::to_string(i % 5) + ",1," + std::to_string(i % 2) + "\n";
  CsvFile csv(text);
  nn::DataSpec spec;
  spec.path = csv.path;
  spec.dataset = "shard-cache.csv";
  spec.validation = 10;
  spec.test_fraction = 0.2;
  ShardCache cache("", [] { return std::vector<std::shared_ptr<const Shard>>{}; });
  EXPECT_EQ(cache.if_ready(spec), nullptr);  // the first call starts the build
  std::shared_ptr<const Shard> sh = cache.get(spec);
  ASSERT_NE(sh, nullptr);
  EXPECT_EQ(sh->sample_shape, (std::vector<std::int64_t>{3}));
  EXPECT_EQ(sh->classes, 2);
  EXPECT_EQ(sh->provenance.at("dataset_sha256"), data::sha256_files({csv.path}));
  EXPECT_EQ(sh->provenance.at("dataset"), std::filesystem::path(csv.path).filename().string());

  // What browsers fetch is what native loading gives, bit for bit.
  auto asset = cache.find("/shards/" + sh->sha256 + ".safetensors");
  ASSERT_TRUE(asset.has_value());
  data::Dataset got = data::decode_shard(*sh->bytes, "shard");
  data::Dataset want = data::load(data::load_options(spec, ""));
  ASSERT_EQ(got.train.size(), 30);  // 50 rows: 10 test, 10 validation
  ASSERT_EQ(got.test.size(), 10);
  EXPECT_EQ(0, std::memcmp(got.train.x.data(), want.train.x.data(), want.train.x.numel() * 4));
  EXPECT_EQ(got.val.y, want.val.y);

  // Another label column is another data set: another shard.
  nn::DataSpec other = spec;
  other.label_column = "b";
  std::shared_ptr<const Shard> sh2 = cache.get(other);
  EXPECT_NE(sh2->sha256, sh->sha256);
  EXPECT_EQ(sh2->classes, 5);
  EXPECT_EQ(sh2->sample_shape, (std::vector<std::int64_t>{3}));
}

}  // namespace shard_cache_test
}  // namespace dnnlab::server
