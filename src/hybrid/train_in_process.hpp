// Hybrid training in one process: N native clients as threads on an
// InProcessHub, the server on the calling thread. What `dnnlab train
// --distributed --clients N` runs, and what the tests drive.
//
//   hybrid::InProcessRun r = hybrid::train_in_process(spec, input, classes, train, &val,
//                                                     &observer, /*clients=*/4, {}, &model);
#pragma once
#include <vector>

#include "hybrid/client.hpp"
#include "hybrid/server.hpp"

namespace dnnlab::hybrid {

struct InProcessRun {
  std::vector<nn::EpochResult> curve;
  HybridStats stats;
  std::vector<ClientReport> clients;
  uint64_t version = 0;  // the features' version at the end
};

// Trains `spec` for its epochs. `client_options[i]`, where given, configures
// client i (tests: liars, stragglers, leavers). `model_out` receives the
// whole trained model. Throws SpecError (model.parts), std::invalid_argument
// for a client count outside 1..kMaxClients, and what HybridServer throws;
// the client threads are always joined.
InProcessRun train_in_process(const nn::RunSpec& spec, const nn::Shape& input, int64_t num_classes,
                              const nn::LabeledData& train, const nn::LabeledData* val,
                              nn::TrainObserver* obs, int clients, const HybridOptions& options,
                              nn::Model* model_out = nullptr,
                              const std::vector<ClientOptions>& client_options = {});

}  // namespace dnnlab::hybrid
