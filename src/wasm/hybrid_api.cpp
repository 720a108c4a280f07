// The browser core's C API for distributed runs (dnnlab_wasm.h,
// dnnlab_hybrid_*): a client of `dnnlab train --distributed` over a shard.
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "api_internal.hpp"
#include "hybrid/client_step.hpp"
#include "nn/model.hpp"
#include "spec_json.hpp"

using namespace dnnlab::wasm::api_detail;

// A browser client of a distributed run: the client's step (src/hybrid)
// over the shard's training split, which it keeps alive.
struct dnnlab_hybrid {
  std::shared_ptr<const data::Dataset> ds;
  std::unique_ptr<dnnlab::hybrid::ClientStep> step;
  std::vector<uint8_t> reply;  // the last frame to send back
  int64_t frames_in = 0, bytes_in = 0, frames_out = 0, bytes_out = 0;
  std::string info;
};

DNNLAB_API dnnlab_hybrid* dnnlab_hybrid_create(const char* spec_json, dnnlab_shard* s,
                                               const char* fingerprint) {
  dnnlab_hybrid* out = nullptr;
  int st = api([&] {
    need(spec_json && s && fingerprint, "null spec, shard or fingerprint");
    dnnlab::wasm::CoreSpec spec = dnnlab::wasm::parse_core_spec(spec_json);
    nn::Shape in;
    if (spec.model.input.size() >= static_cast<size_t>(nn::kMaxRank))
      throw dnnlab::SpecError(spec.model.where, "input", "too many dimensions");
    for (int64_t d : spec.model.input) in.d[in.rank++] = d;
    const data::Split& train = s->ds->train;
    need(train.size() > 0, "the shard's train split is empty");
    // The split as the native client loads it: [N, sample...] (the fingerprint
    // covers the shape too).
    const std::string mine = dnnlab::hybrid::data_fingerprint(train.x.view());
    if (mine != fingerprint)
      throw dnnlab::DataError("shard", -1,
                              "the shard's training split (" + std::to_string(train.size()) +
                                  " samples, fingerprint " + mine + ") is not the server's (" +
                                  std::string(fingerprint) + ")");
    if (s->ds->sample_shape.numel() != in.numel())
      throw dnnlab::ShapeError(
          "the shard's samples are " + std::to_string(s->ds->sample_shape.numel()) +
          " values, the model's input " + in.str() + " needs " + std::to_string(in.numel()));
    auto h = std::make_unique<dnnlab_hybrid>();
    h->ds = s->ds;
    const nn::TensorView x(const_cast<float*>(train.x.data()), batch_shape(in, train.size()));
    h->step = std::make_unique<dnnlab::hybrid::ClientStep>(
        nn::Model::build_part(spec.model, "features", in, spec.classes, spec.train.seed), x,
        spec.train.seed);
    out = h.release();
  });
  if (st == DNNLAB_OK) g_status = DNNLAB_OK, g_error.clear();
  return out;
}

DNNLAB_API int dnnlab_hybrid_frame(dnnlab_hybrid* h, const uint8_t* bytes, int32_t len,
                                   int32_t* reply_len) {
  return api([&] {
    need(h && bytes && reply_len && len >= 0, "null pointer or negative length");
    *reply_len = 0;
    h->reply.clear();
    ++h->frames_in;
    h->bytes_in += len;
    const dnnlab::hybrid::Frame fr =
        dnnlab::hybrid::decode(std::span<const uint8_t>(bytes, static_cast<size_t>(len)));
    // The step's compute time travels in the answer (the run page splits
    // the server's turnaround into this and the transfer).
    const auto t0 = std::chrono::steady_clock::now();
    std::optional<dnnlab::hybrid::Frame> r = h->step->on_frame(fr);
    if (!r) return;
    r->compute_us = dnnlab::hybrid::compute_micros(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    h->reply = dnnlab::hybrid::encode(*r);
    ++h->frames_out;
    h->bytes_out += static_cast<int64_t>(h->reply.size());
    *reply_len = static_cast<int32_t>(h->reply.size());
  });
}

DNNLAB_API const uint8_t* dnnlab_hybrid_reply(dnnlab_hybrid* h) {
  const uint8_t* out = nullptr;
  api([&] {
    need(h, "null client");
    out = h->reply.data();
  });
  return out;
}

DNNLAB_API const char* dnnlab_hybrid_info(dnnlab_hybrid* h) {
  const char* out = nullptr;
  api([&] {
    need(h, "null client");
    const uint64_t v = h->step->version();
    h->info =
        "{\"tickets\":" + std::to_string(h->step->tickets()) + ",\"version\":" +
        (v == dnnlab::hybrid::ClientStep::kNoVersion ? std::string("null") : std::to_string(v)) +
        ",\"done\":" + (h->step->done() ? "true" : "false") +
        ",\"frames_in\":" + std::to_string(h->frames_in) +
        ",\"bytes_in\":" + std::to_string(h->bytes_in) +
        ",\"frames_out\":" + std::to_string(h->frames_out) +
        ",\"bytes_out\":" + std::to_string(h->bytes_out) + "}";
    out = h->info.c_str();
  });
  return out;
}

DNNLAB_API void dnnlab_hybrid_free(dnnlab_hybrid* h) {
  api([&] { delete h; });
}
