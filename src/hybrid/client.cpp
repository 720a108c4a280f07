// The native client's loop: one frame at a time through hybrid::ClientStep,
// over a ClientTransport.
#include "hybrid/client.hpp"

#include <exception>

#include "hybrid/client_step.hpp"
#include "nn/model.hpp"

namespace dnnlab::hybrid {
namespace {

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

}  // namespace

ClientReport run_client(ClientTransport& link, const nn::ModelSpec& model, const nn::Shape& input,
                        int64_t num_classes, uint64_t seed, nn::TensorView shard,
                        const ClientOptions& o) {
  ClientReport report;
  try {
    ClientStep step(nn::Model::build_part(model, "features", input, num_classes, seed), shard,
                    seed);
    int64_t tickets_seen = 0;
    while (!step.done()) {
      const auto waited = Clock::now();
      std::optional<Bytes> b = link.receive(waited + o.idle_timeout);
      report.wait_seconds += seconds_since(waited);
      if (!b) {
        if (!link.closed()) report.error = "the server was silent too long";
        break;
      }
      Frame fr = decode(*b);
      if (fr.kind == FrameKind::kTicket && o.leave_at_ticket > 0 &&
          ++tickets_seen == o.leave_at_ticket)
        break;
      // A ticket's step is the features forward, an activation gradient's
      // the backward (the rest of either is copying).
      const auto t0 = Clock::now();
      const FrameKind kind = fr.kind;
      const int64_t rows = static_cast<int64_t>(fr.indices.size());
      std::optional<Frame> reply = step.on_frame(fr);
      const double secs = seconds_since(t0);
      if (kind == FrameKind::kTicket) {
        report.forward_seconds += secs;
        report.rows += rows;
      } else if (kind == FrameKind::kActivationGrads) {
        report.backward_seconds += secs;
      }
      report.tickets = step.tickets();
      if (reply) {
        reply->compute_us = compute_micros(secs);  // the run page's compute / transfer split
        if (o.tamper) o.tamper(*reply);
        link.send(encode(*reply));
      }
    }
  } catch (const std::exception& e) {
    report.error = e.what();
  }
  link.close();
  return report;
}

}  // namespace dnnlab::hybrid
