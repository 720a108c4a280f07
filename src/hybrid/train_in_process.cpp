#include "hybrid/train_in_process.hpp"

#include <stdexcept>
#include <thread>

namespace dnnlab::hybrid {

InProcessRun train_in_process(const nn::RunSpec& spec, const nn::Shape& input, int64_t num_classes,
                              const nn::LabeledData& train, const nn::LabeledData* val,
                              nn::TrainObserver* obs, int clients, const HybridOptions& options,
                              nn::Model* model_out,
                              const std::vector<ClientOptions>& client_options) {
  if (clients < 1 || clients > kMaxClients)
    throw std::invalid_argument("clients: " + std::to_string(clients) + " is outside 1.." +
                                std::to_string(kMaxClients));
  check_hybrid_spec(spec.model);
  InProcessHub hub;
  InProcessRun run;
  run.clients.resize(clients);
  std::vector<ClientOptions> copts(clients);
  for (size_t i = 0; i < client_options.size() && i < copts.size(); ++i)
    copts[i] = client_options[i];
  std::vector<std::unique_ptr<ClientTransport>> links;
  for (int i = 0; i < clients; ++i) links.push_back(hub.connect());
  std::vector<std::thread> threads;
  // Joins the clients however the server's part ends.
  struct Joiner {
    InProcessHub& hub;
    std::vector<std::thread>& threads;
    ~Joiner() {
      for (int c = 0; c < hub.clients(); ++c) hub.disconnect(c);
      for (auto& t : threads) t.join();
    }
  } joiner{hub, threads};
  for (int i = 0; i < clients; ++i)
    threads.emplace_back([&, i] {
      run.clients[i] =
          run_client(*links[i], spec.model, input, num_classes, spec.train.seed, train.x, copts[i]);
    });
  HybridServer server(spec, input, num_classes, hub, options);
  run.curve = server.fit(train, val, obs);
  server.finish();
  run.stats = server.stats();
  run.version = server.version();
  if (model_out) *model_out = std::move(server.whole());
  return run;
}

}  // namespace dnnlab::hybrid
