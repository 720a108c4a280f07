// Writes a data shard for tests/wasm/api.test.mjs: the splits data::load
// gives natively, encoded by data::encode_shard (U8 + lut for IDX data, F32
// for the synthetic set).
//
//   make_shard OUT.safetensors DATASET LIMIT_TRAIN VALIDATION [NORMALIZE]
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "data/dataset.hpp"
#include "data/shard.hpp"

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: make_shard OUT DATASET LIMIT_TRAIN VALIDATION [NORMALIZE]\n");
    return 2;
  }
  try {
    dnnlab::data::LoadOptions o;
    o.name = argv[2];
    o.limit_train = std::atoll(argv[3]);
    o.validation = std::atoll(argv[4]);
    if (argc > 5) o.normalize = argv[5];
    o.keep_raw = true;
    const std::string bytes = dnnlab::data::encode_shard(dnnlab::data::load(o));
    std::ofstream f(argv[1], std::ios::binary | std::ios::trunc);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!f) throw std::runtime_error(std::string("cannot write ") + argv[1]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "make_shard: %s\n", e.what());
    return 1;
  }
  return 0;
}
