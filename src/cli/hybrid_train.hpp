// `dnnlab train --distributed`: the hybrid trainer with in-process clients
// (--clients N) or, with --listen ADDR, clients in other processes that join
// over WebSocket (`dnnlab join`). docs/distributed.md.
#pragma once
#include <boost/asio/ssl/context.hpp>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/ticket_log.hpp"
#include "data/dataset.hpp"
#include "experiment/training_run.hpp"
#include "nn/model.hpp"
#include "nn/spec.hpp"
#include "nn/train.hpp"

namespace dnnlab::cli {

struct DistributedFlags {
  int clients = 1;
  int staleness = 0;
  std::string wire = "fp32";  // or "fp16", "int8": activations and their gradients
  // With int8: error feedback on "grads" (the server's activation
  // gradients), "acts" (the clients' activations), "both" or "off".
  std::string feedback = "off";
  std::string listen;       // "": in-process clients
  int client_wait_s = 600;  // --listen: how long to wait for the clients to join
  // --listen over TLS (wss://, https://): the files, and the context loaded
  // from them before the data (a bad certificate or key stops the run first).
  std::string tls_cert, tls_key;
  std::shared_ptr<boost::asio::ssl::context> tls;
  bool quiet = false;
  // --ticket-log: opened before the data is read (a bad path stops the run
  // first); each ticket's end goes there.
  std::string ticket_log;
  std::shared_ptr<TicketLogFile> tickets;
};

// Trains `spec` through the hybrid trainer; `model` receives the whole
// trained model, `report` metrics.json's `distributed` object.
experiment::RunResult distributed_run(const DistributedFlags& o, const nn::RunSpec& spec,
                                      const data::Dataset& data, nn::TrainObserver* obs,
                                      nn::Model* model, nlohmann::json* report);

}  // namespace dnnlab::cli
