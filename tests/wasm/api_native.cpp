// The native half of tests/wasm/api.test.mjs: drives the same C API
// (src/wasm/api.cpp, compiled natively) on the files the test wrote and
// prints the metrics as JSON, for comparison with the wasm module.
//
//   api_native SPEC.json X.f32 Y.i32 EPOCHS
//   api_native --shard SHARD.safetensors SPEC.json EPOCHS   (train split, val each epoch, test)
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "dnnlab_wasm.h"

static std::string slurp(const char* path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

static void ok(int st) {
  if (st != DNNLAB_OK) {
    std::fprintf(stderr, "%s\n", dnnlab_last_error());
    std::exit(1);
  }
}

// Trains on a shard as the join page does: fit_epoch per epoch, then test.
static int shard_main(const char* shard_path, const char* spec_path, int epochs) {
  const std::string bytes = slurp(shard_path), spec = slurp(spec_path);
  dnnlab_shard* s =
      dnnlab_shard_open(reinterpret_cast<const uint8_t*>(bytes.data()), int32_t(bytes.size()));
  dnnlab_model* m = s ? dnnlab_model_create(spec.c_str()) : nullptr;
  if (!m) {
    std::fprintf(stderr, "%s\n", dnnlab_last_error());
    return 1;
  }
  ok(dnnlab_model_use_split(m, s, DNNLAB_SPLIT_TRAIN));
  std::printf("{\"kernels\": \"%s\", \"epochs\": [", dnnlab_kernels_name());
  for (int e = 0; e < epochs; ++e) {
    double r[8];
    ok(dnnlab_model_fit_epoch(m, s, r));
    std::printf(
        "%s{\"train_loss\": %.9g, \"train_acc\": %.9g, \"val_loss\": %.9g, \"val_acc\": %.9g, "
        "\"lr\": %.9g}",
        e ? ", " : "", r[0], r[1], r[2], r[3], r[6]);
  }
  // DNNLAB_API_SAVE=PATH: the trained weights and state, as safetensors.
  if (const char* path = std::getenv("DNNLAB_API_SAVE")) {
    int32_t len = 0;
    const uint8_t* w = dnnlab_model_save(m, &len);
    if (FILE* f = std::fopen(path, "wb")) {
      std::fwrite(w, 1, static_cast<size_t>(len), f);
      std::fclose(f);
    }
  }
  double t[2];
  ok(dnnlab_model_evaluate_split(m, s, DNNLAB_SPLIT_TEST, t));
  std::printf("], \"test\": {\"loss\": %.9g, \"accuracy\": %.9g}, \"info\": %s}\n", t[0], t[1],
              dnnlab_shard_info(s));
  dnnlab_model_free(m);
  dnnlab_shard_free(s);
  return 0;
}

int main(int argc, char** argv) {
  if (argc == 5 && std::strcmp(argv[1], "--shard") == 0)
    return shard_main(argv[2], argv[3], std::atoi(argv[4]));
  if (argc != 5) {
    std::fprintf(stderr, "usage: api_native SPEC.json X.f32 Y.i32 EPOCHS\n");
    return 2;
  }
  const std::string spec = slurp(argv[1]), xs = slurp(argv[2]), ys = slurp(argv[3]);
  std::vector<float> x(xs.size() / 4);
  std::vector<int32_t> y(ys.size() / 4);
  std::memcpy(x.data(), xs.data(), x.size() * 4);
  std::memcpy(y.data(), ys.data(), y.size() * 4);
  dnnlab_model* m = dnnlab_model_create(spec.c_str());
  if (!m) {
    std::fprintf(stderr, "%s\n", dnnlab_last_error());
    return 1;
  }
  const int n = static_cast<int>(y.size());
  ok(dnnlab_model_load_data(m, x.data(), static_cast<int32_t>(x.size()), y.data(), n));
  std::printf("{\"kernels\": \"%s\", \"epochs\": [", dnnlab_kernels_name());
  for (int e = 0; e < std::atoi(argv[4]); ++e) {
    double r[4];
    ok(dnnlab_model_train_epochs(m, 1, r));
    std::printf("%s{\"loss\": %.9g, \"accuracy\": %.9g}", e ? ", " : "", r[0], r[1]);
  }
  double ev[2];
  ok(dnnlab_model_evaluate(m, x.data(), static_cast<int32_t>(x.size()), y.data(), n, ev));
  std::vector<float> p(dnnlab_model_num_params(m));
  ok(dnnlab_model_get_params(m, p.data(), static_cast<int32_t>(p.size())));
  double checksum = 0;
  for (float v : p) checksum += std::fabs(v);
  std::printf("], \"eval\": {\"loss\": %.9g, \"accuracy\": %.9g}, \"checksum\": %.9g}\n", ev[0],
              ev[1], checksum);
  dnnlab_model_free(m);
  return 0;
}
