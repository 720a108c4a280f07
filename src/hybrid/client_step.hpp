// A hybrid client's side of a step, one frame at a time: no transport, no
// threads, no clock, so that the browser core (src/wasm, built with em++)
// runs the same code as `dnnlab join` and the in-process clients
// (hybrid::run_client drives it over a ClientTransport).
//
//   hybrid::ClientStep step(nn::Model::build_part(spec, "features", input, classes, seed),
//                           shard, seed);            // [N, sample...]: the training split
//   for each frame the server sends:
//     std::optional<hybrid::Frame> reply = step.on_frame(hybrid::decode(bytes));
//     if (reply) send(hybrid::encode(*reply));
//     if (step.done()) break;                        // the server said bye
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "hybrid/feedback.hpp"
#include "hybrid/wire.hpp"
#include "nn/model.hpp"
#include "nn/tensor.hpp"

namespace dnnlab::hybrid {

class ClientStep {
 public:
  // `shard` must outlive the step: tickets name its rows. `run_seed`: the
  // run's seed (the spec's train.seed), which its tickets' dropout masks
  // are drawn from (ticket_dropout_seed).
  ClientStep(nn::Model features, nn::TensorView shard, uint64_t run_seed);

  // Weights: loaded, no reply. A ticket: the features' activations on its
  // rows, in the ticket's dtype (an int8 ticket with the feedback flag: plus
  // the quantisation error of this client's previous activations). Activation gradients for the
  // ticket held: the weight gradients and the state; for a ticket the server gave up on: nothing.
  // Bye: done(). Throws std::runtime_error naming what is wrong with the frame (a kind a server
  // never sends, a shape, a version this client does not hold, an index outside the shard).
  std::optional<Frame> on_frame(const Frame& fr);

  bool done() const { return done_; }
  int64_t tickets() const { return tickets_; }  // answered with activations
  // The features' version held; kNoVersion before the first weights.
  static constexpr uint64_t kNoVersion = ~uint64_t{0};
  uint64_t version() const { return version_; }

 private:
  void load_weights(const Frame& fr);
  Frame answer_ticket(const Frame& fr);
  std::optional<Frame> answer_grads(const Frame& fr);

  nn::Model f_;
  nn::TensorView shard_;
  std::vector<nn::Param*> params_, state_;
  nn::Tensor batch_;
  ErrorFeedback act_feedback_;
  uint64_t run_seed_ = 0;
  uint64_t version_ = kNoVersion, ticket_ = 0, ticket_version_ = 0;
  int64_t tickets_ = 0;
  bool done_ = false;
};

// The seed of the features' dropout masks for one ticket: from the run's
// seed, the ticket's model version and its sample indices. Every client
// draws the same masks for the same ticket, and the server's re-check draws
// them too (docs/distributed.md "Re-checks"), while the batches of a round
// draw different ones (each client drawing from one stream of its own
// would give every client the same masks: they all start from the seed).
uint64_t ticket_dropout_seed(uint64_t run_seed, uint64_t version,
                             std::span<const uint32_t> indices);

// FNV-1a 64 over a split's shape and values, as 16 hex digits: a client
// checks that the shard it loaded is the server's (the welcome's
// data_fingerprint).
std::string data_fingerprint(nn::TensorView x);

}  // namespace dnnlab::hybrid
