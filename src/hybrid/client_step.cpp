// The client's step logic (client_step.hpp): frames in, frames out.
#include "hybrid/client_step.hpp"

#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "nn/rng.hpp"

namespace dnnlab::hybrid {

ClientStep::ClientStep(nn::Model features, nn::TensorView shard, uint64_t run_seed)
    : f_(std::move(features)), shard_(shard), run_seed_(run_seed) {
  params_ = f_.params();
  state_ = f_.state();
}

uint64_t ticket_dropout_seed(uint64_t run_seed, uint64_t version,
                             std::span<const uint32_t> indices) {
  auto splitmix64 = [](uint64_t s) { return nn::splitmix64(s); };  // of a copy
  uint64_t h = splitmix64(run_seed ^ 0x64726f706f7574ull);         // "dropout"
  h = splitmix64(h ^ version);
  for (uint32_t i : indices) h = splitmix64(h ^ i);
  return splitmix64(h ^ indices.size());
}

std::optional<Frame> ClientStep::on_frame(const Frame& fr) {
  switch (fr.kind) {
    case FrameKind::kBye:
      done_ = true;
      return std::nullopt;
    case FrameKind::kWeights:
      load_weights(fr);
      return std::nullopt;
    case FrameKind::kTicket:
      return answer_ticket(fr);
    case FrameKind::kActivationGrads:
      return answer_grads(fr);
    default:
      throw std::runtime_error(std::string("the server sent a ") + frame_kind_name(fr.kind) +
                               " frame");
  }
}

void ClientStep::load_weights(const Frame& fr) {
  if (fr.tensors.size() != params_.size() + state_.size())
    throw std::runtime_error("weights frame with " + std::to_string(fr.tensors.size()) +
                             " tensors, the features part has " +
                             std::to_string(params_.size() + state_.size()));
  for (size_t i = 0; i < fr.tensors.size(); ++i) {
    nn::Tensor& dst = i < params_.size() ? params_[i]->value : state_[i - params_.size()]->value;
    if (!(fr.tensors[i].shape() == dst.shape()))
      throw std::runtime_error("weights tensor " + std::to_string(i) + " has shape " +
                               fr.tensors[i].shape().str() + ", expected " + dst.shape().str());
    std::memcpy(dst.data(), fr.tensors[i].data(), sizeof(float) * dst.numel());
  }
  version_ = fr.version;
}

Frame ClientStep::answer_ticket(const Frame& fr) {
  if (fr.version != version_)
    throw std::runtime_error("ticket " + std::to_string(fr.ticket) + " is for version " +
                             std::to_string(fr.version) + ", this client holds " +
                             (version_ == kNoVersion ? "none" : std::to_string(version_)));
  const int64_t rows = static_cast<int64_t>(fr.indices.size()), row = shard_.cols();
  nn::Shape bs = shard_.shape();
  bs[0] = rows;
  batch_.resize(bs);
  for (int64_t i = 0; i < rows; ++i) {
    const uint32_t src = fr.indices[i];
    if (src >= shard_.rows())
      throw std::runtime_error("ticket index " + std::to_string(src) + " outside the shard of " +
                               std::to_string(shard_.rows()));
    std::memcpy(batch_.data() + i * row, shard_.data() + src * row, sizeof(float) * row);
  }
  Frame out{FrameKind::kActivations, fr.version, fr.ticket, {}, {}, fr.dtype};  // as asked
  f_.set_rng_seed(ticket_dropout_seed(run_seed_, fr.version, fr.indices));
  const nn::TensorView h = f_.forward(batch_.view(), /*training=*/true);
  out.tensors.push_back(nn::Tensor::uninitialized(h.shape()));  // written whole below
  std::memcpy(out.tensors[0].data(), h.data(), sizeof(float) * h.numel());
  if (fr.dtype == Dtype::kInt8 && fr.feedback)
    act_feedback_.carry(out.tensors[0], fr.dtype);
  else
    act_feedback_.clear();
  ticket_ = fr.ticket;
  ticket_version_ = fr.version;
  ++tickets_;
  return out;
}

std::optional<Frame> ClientStep::answer_grads(const Frame& fr) {
  if (fr.ticket != ticket_) return std::nullopt;  // a ticket the server gave up on
  ticket_ = 0;
  f_.backward_from("features", fr.tensors[0].view());
  Frame out{FrameKind::kWeightGrads, ticket_version_, fr.ticket, {}, {}};
  for (nn::Param* p : params_) out.tensors.push_back(p->grad);
  for (nn::Param* p : state_) out.tensors.push_back(p->value);
  return out;
}

std::string data_fingerprint(nn::TensorView x) {
  uint64_t h = 14695981039346656037ull;
  auto mix = [&](const void* p, size_t n) {
    const auto* b = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  };
  const nn::Shape& s = x.shape();
  for (int i = 0; i < s.rank; ++i) {
    const int64_t d = s[i];
    mix(&d, sizeof d);
  }
  mix(x.data(), sizeof(float) * static_cast<size_t>(x.numel()));
  char out[17];
  std::snprintf(out, sizeof out, "%016llx", static_cast<unsigned long long>(h));
  return out;
}

}  // namespace dnnlab::hybrid
