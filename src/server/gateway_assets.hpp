// The files a browser worker fetches over HTTP: the wasm core under
// content-hashed names, and the data shards of the trials it is sent, built
// on threads of their own and kept in memory for a few data specs.
#pragma once
#include <cstdint>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "nn/spec.hpp"
#include "server/gateway.hpp"

namespace dnnlab::server {

// <web_root>/core/* as /core/<stem>.<sha256:16>.<ext>; rescanned at most every 5 s.
// Thread-safe: the io thread serves the files, the gateway's thread names them.
class CoreAssets {
 public:
  explicit CoreAssets(std::string web_root) : web_root_(std::move(web_root)) {}
  void scan();
  std::optional<GatewayAsset> find(const std::string& path);
  bool has(const std::string& file) const {
    std::lock_guard lock(mu_);
    return url_of_.count(file) > 0;
  }
  nlohmann::json urls() const;  // {"js","wasm"[,"relaxed_wasm"]}

 private:
  std::string web_root_;
  mutable std::mutex mu_;
  std::map<std::string, GatewayAsset> assets_;  // hashed path -> file
  std::map<std::string, std::string> url_of_;   // file name -> hashed path
  double scanned_at_ = -1e9;
};

// One data spec's train/validation/test splits in the shard format.
struct Shard {
  std::string sha256;
  std::shared_ptr<const std::string> bytes;
  std::vector<std::int64_t> sample_shape;
  int classes = 0;
  nlohmann::json provenance;
};

class ShardCache {
 public:
  // `held` lists the shards clients are still pointed to: never dropped.
  ShardCache(std::string data_dir, std::function<std::vector<std::shared_ptr<const Shard>>()> held)
      : data_dir_(std::move(data_dir)), held_(std::move(held)) {}
  ~ShardCache();  // waits for a shard still being built
  ShardCache(const ShardCache&) = delete;
  ShardCache& operator=(const ShardCache&) = delete;

  // The shard for `spec`, or nullptr while it is being built: the first call
  // starts the build on its own thread and always returns nullptr. A build
  // that failed rethrows here.
  std::shared_ptr<const Shard> if_ready(const nn::DataSpec& spec);
  // The same, waiting for the build.
  std::shared_ptr<const Shard> get(const nn::DataSpec& spec);
  // /shards/<sha256>.safetensors. Thread-safe (the io thread serves them);
  // the rest is called from one thread.
  std::optional<GatewayAsset> find(std::string_view path) const;

 private:
  std::string data_dir_;
  std::function<std::vector<std::shared_ptr<const Shard>>()> held_;
  // data key -> shard, built on a thread of its own (a Fashion-MNIST shard
  // takes 1-2 s: the io thread must not wait for it)
  std::map<std::string, std::shared_future<std::shared_ptr<const Shard>>> by_key_;
  std::vector<std::thread> builders_;
  mutable std::mutex bytes_mu_;
  std::map<std::string, std::shared_ptr<const std::string>> bytes_;  // sha -> bytes
};

}  // namespace dnnlab::server
