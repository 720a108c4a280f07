// The native client's loop: one ticket at a time, frames in order.
#include "hybrid/client.hpp"

#include <cstring>
#include <exception>

#include "nn/model.hpp"

namespace dnnlab::hybrid {
namespace {

constexpr uint64_t kNoVersion = ~uint64_t{0};

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

class Client {
 public:
  Client(ClientTransport& link, nn::Model features, nn::TensorView shard, const ClientOptions& o)
      : link_(link), f_(std::move(features)), shard_(shard), o_(o) {
    params_ = f_.params();
    state_ = f_.state();
  }

  ClientReport run() {
    ClientReport& report = report_;
    try {
      while (true) {
        const auto t0 = Clock::now();
        std::optional<Bytes> b = link_.receive(t0 + o_.idle_timeout);
        report.wait_seconds += seconds_since(t0);
        if (!b) {
          if (!link_.closed()) report.error = "the server was silent too long";
          break;
        }
        Frame fr = decode(*b);
        if (fr.kind == FrameKind::kBye) break;
        if (fr.kind == FrameKind::kWeights) {
          load_weights(fr);
        } else if (fr.kind == FrameKind::kTicket) {
          if (o_.leave_at_ticket > 0 && ++tickets_seen_ == o_.leave_at_ticket) break;
          answer_ticket(fr);
          ++report.tickets;
        } else if (fr.kind == FrameKind::kActivationGrads) {
          answer_grads(fr);
        } else {
          throw std::runtime_error(std::string("the server sent a ") + frame_kind_name(fr.kind) +
                                   " frame");
        }
      }
    } catch (const std::exception& e) {
      report.error = e.what();
    }
    link_.close();
    return report;
  }

 private:
  void send(Frame f) {
    if (o_.tamper) o_.tamper(f);
    link_.send(encode(f));
  }

  void load_weights(const Frame& fr) {
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

  void answer_ticket(const Frame& fr) {
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
    const auto t0 = Clock::now();
    const nn::TensorView h = f_.forward(batch_.view(), /*training=*/true);
    report_.forward_seconds += seconds_since(t0);
    report_.rows += rows;
    out.tensors.emplace_back(h.shape());
    std::memcpy(out.tensors[0].data(), h.data(), sizeof(float) * h.numel());
    ticket_ = fr.ticket;
    ticket_version_ = fr.version;
    send(std::move(out));
  }

  void answer_grads(const Frame& fr) {
    if (fr.ticket != ticket_) return;  // a ticket the server gave up on
    ticket_ = 0;
    const auto t0 = Clock::now();
    f_.backward_from("features", fr.tensors[0].view());
    report_.backward_seconds += seconds_since(t0);
    Frame out{FrameKind::kWeightGrads, ticket_version_, fr.ticket, {}, {}};
    for (nn::Param* p : params_) out.tensors.push_back(p->grad);
    for (nn::Param* p : state_) out.tensors.push_back(p->value);
    send(std::move(out));
  }

  ClientTransport& link_;
  nn::Model f_;
  nn::TensorView shard_;
  const ClientOptions& o_;
  std::vector<nn::Param*> params_, state_;
  nn::Tensor batch_;
  uint64_t version_ = kNoVersion, ticket_ = 0, ticket_version_ = 0;
  int64_t tickets_seen_ = 0;
  ClientReport report_;
};

}  // namespace

ClientReport run_client(ClientTransport& link, const nn::ModelSpec& model, const nn::Shape& input,
                        int64_t num_classes, uint64_t seed, nn::TensorView shard,
                        const ClientOptions& options) {
  try {
    return Client(link, nn::Model::build_part(model, "features", input, num_classes, seed), shard,
                  options)
        .run();
  } catch (const std::exception& e) {
    link.close();
    ClientReport r;
    r.error = e.what();
    return r;
  }
}

}  // namespace dnnlab::hybrid
