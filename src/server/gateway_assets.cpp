// The wasm core under content-hashed names, and data shards (gateway_assets.hpp).
#include "server/gateway_assets.hpp"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "data/dataset.hpp"
#include "data/shard.hpp"
#include "experiment/training_run.hpp"
#include "server/gateway_wire.hpp"
#include "server/static_files.hpp"
#include "store/sha256.hpp"

namespace dnnlab::server {

namespace fs = std::filesystem;
using nlohmann::json;

void CoreAssets::scan() {
  std::lock_guard lock(mu_);
  const double now = wire::unix_now();
  if (now - scanned_at_ < 5) return;
  scanned_at_ = now;
  assets_.clear();
  url_of_.clear();
  if (web_root_.empty()) return;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(fs::path(web_root_) / "core", ec)) {
    if (!e.is_regular_file(ec)) continue;
    std::ifstream f(e.path(), std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    auto bytes = std::make_shared<const std::string>(ss.str());
    const std::string name = e.path().filename().string();
    const std::size_t dot = name.find('.');
    const std::string stem = name.substr(0, dot);
    const std::string ext = dot == std::string::npos ? "" : name.substr(dot);
    const std::string hashed = stem + "." + store::sha256_hex(*bytes).substr(0, 16) + ext;
    assets_["/core/" + hashed] = {std::string(content_type_for(ext)), bytes};
    url_of_[name] = "/core/" + hashed;
  }
}

std::optional<GatewayAsset> CoreAssets::find(const std::string& path) {
  scan();
  std::lock_guard lock(mu_);
  auto it = assets_.find(path);
  if (it == assets_.end()) return std::nullopt;
  return it->second;
}

json CoreAssets::urls() const {
  std::lock_guard lock(mu_);
  auto url = [&](const char* name) {
    auto it = url_of_.find(name);
    return it == url_of_.end() ? std::string() : it->second;
  };
  json urls = {{"js", url("dnnlab_core.mjs")}, {"wasm", url("dnnlab_core.wasm")}};
  // The relaxed-SIMD build shares the glue; engines that validate relaxed
  // SIMD load it instead (faster GEMM), the others ignore it.
  if (std::string relaxed = url("dnnlab_core_relaxed.wasm"); !relaxed.empty())
    urls["relaxed_wasm"] = relaxed;
  return urls;
}

namespace {

std::shared_ptr<const Shard> build_shard(const data::LoadOptions& lo) {
  data::Dataset ds = data::load(lo);
  auto s = std::make_shared<Shard>();
  s->bytes = std::make_shared<const std::string>(data::encode_shard(ds));
  s->sha256 = store::sha256_hex(*s->bytes);
  s->sample_shape.assign(ds.sample_shape.d.begin(),
                         ds.sample_shape.d.begin() + ds.sample_shape.rank);
  s->classes = ds.num_classes;
  s->provenance = experiment::provenance(ds);
  return s;
}

}  // namespace

ShardCache::~ShardCache() {
  for (auto& b : builders_) b.join();
}

std::shared_ptr<const Shard> ShardCache::if_ready(const nn::DataSpec& spec) {
  const std::string key = spec.key();
  auto it = by_key_.find(key);
  // A build started by this call is never ready in it, however fast it is:
  // the caller's answer ("preparing data") does not depend on scheduling.
  const bool started = it == by_key_.end();
  if (started) {
    if (by_key_.size() >= 4) {  // bound memory: keep the shards of a few data specs
      by_key_.clear();
      std::lock_guard lock(bytes_mu_);
      bytes_.clear();
      // ... but never one a held ticket still points its client to.
      for (const auto& sh : held_()) bytes_[sh->sha256] = sh->bytes;
    }
    data::LoadOptions lo = experiment::load_options(spec, data_dir_);
    lo.keep_raw = true;
    auto done = std::make_shared<std::promise<std::shared_ptr<const Shard>>>();
    it = by_key_.emplace(key, done->get_future().share()).first;
    builders_.emplace_back([done, lo] {
      try {
        done->set_value(build_shard(lo));
      } catch (...) {
        done->set_exception(std::current_exception());
      }
    });
  }
  if (started || it->second.wait_for(std::chrono::seconds(0)) != std::future_status::ready)
    return nullptr;
  std::shared_ptr<const Shard> sh = it->second.get();
  std::lock_guard lock(bytes_mu_);
  bytes_[sh->sha256] = sh->bytes;
  return sh;
}

std::shared_ptr<const Shard> ShardCache::get(const nn::DataSpec& spec) {
  if (auto sh = if_ready(spec)) return sh;
  by_key_.at(spec.key()).wait();
  return if_ready(spec);
}

std::optional<GatewayAsset> ShardCache::find(std::string_view path) const {
  constexpr std::string_view kShards = "/shards/", kExt = ".safetensors";
  if (path.rfind(kShards, 0) != 0 || path.size() <= kShards.size() + kExt.size() ||
      path.substr(path.size() - kExt.size()) != kExt)
    return std::nullopt;
  std::string sha(path.substr(kShards.size(), path.size() - kShards.size() - kExt.size()));
  std::lock_guard lock(bytes_mu_);
  auto it = bytes_.find(sha);
  if (it == bytes_.end()) return std::nullopt;
  return GatewayAsset{"application/octet-stream", it->second};
}

}  // namespace dnnlab::server
