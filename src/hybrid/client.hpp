// A native hybrid client: holds the `features` part and a cached shard of
// the training data, answers tickets with activations, activation gradients
// with weight gradients, and loads weights when the server sends them.
// `dnnlab train --distributed` runs these as threads on an InProcessHub.
//
//   hybrid::ClientOptions o;
//   std::thread t([&] { hybrid::run_client(*link, spec.model, input, classes, seed, shard, o); });
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "hybrid/transport.hpp"
#include "nn/spec.hpp"
#include "nn/tensor.hpp"

namespace dnnlab::hybrid {

struct ClientOptions {
  // Called on each frame just before it is sent. Tests use it to make a
  // client lie (scaled or random gradients, wrong versions) or straggle.
  std::function<void(Frame&)> tamper;
  // Leave (close the link) on receiving this ticket (1-based), unanswered;
  // 0: never.
  int64_t leave_at_ticket = 0;
  // Leave when the server says nothing for this long.
  std::chrono::milliseconds idle_timeout{600000};
};

struct ClientReport {
  int64_t tickets = 0;  // tickets answered with activations
  std::string error;    // why it left, if not by the server's bye
  int64_t rows = 0;     // samples run forward
  // Wall seconds in the features part forward and backward, and waiting
  // for the server's frames (its compute and the transfers).
  double forward_seconds = 0, backward_seconds = 0, wait_seconds = 0;
};

// Runs until the server says bye, the link closes, or the client leaves.
// `shard` is [N, ...] with the training samples the tickets' indices name.
// Never throws: a bad frame or index ends the client with `error` set.
ClientReport run_client(ClientTransport& link, const nn::ModelSpec& model, const nn::Shape& input,
                        int64_t num_classes, uint64_t seed, nn::TensorView shard,
                        const ClientOptions& options);

}  // namespace dnnlab::hybrid
