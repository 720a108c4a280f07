// The native client's loop: one frame at a time through hybrid::ClientStep,
// over a ClientTransport.
#include "hybrid/client.hpp"

#include <exception>

#include "hybrid/client_step.hpp"
#include "nn/model.hpp"

namespace dnnlab::hybrid {

ClientReport run_client(ClientTransport& link, const nn::ModelSpec& model, const nn::Shape& input,
                        int64_t num_classes, uint64_t seed, nn::TensorView shard,
                        const ClientOptions& o) {
  ClientReport report;
  try {
    ClientStep step(nn::Model::build_part(model, "features", input, num_classes, seed), shard);
    int64_t tickets_seen = 0;
    while (!step.done()) {
      std::optional<Bytes> b = link.receive(Clock::now() + o.idle_timeout);
      if (!b) {
        if (!link.closed()) report.error = "the server was silent too long";
        break;
      }
      Frame fr = decode(*b);
      if (fr.kind == FrameKind::kTicket && o.leave_at_ticket > 0 &&
          ++tickets_seen == o.leave_at_ticket)
        break;
      std::optional<Frame> reply = step.on_frame(fr);
      report.tickets = step.tickets();
      if (reply) {
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
