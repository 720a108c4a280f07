// `dnnlab join URL --token T [--tls-ca FILE]`: a native client of a hybrid run served by
// `dnnlab train --distributed --listen` in another process or on another
// machine. It gets the run spec from the server, loads (and caches) the
// training split itself, checks it is the server's by fingerprint, and
// trains the model's `features` part on the tickets it is given.
#include <signal.h>

#include <iostream>

#include "cli/commands.hpp"
#include "experiment/training_run.hpp"
#include "hybrid/client.hpp"
#include "hybrid_net/client_link.hpp"
#include "spec/run_spec.hpp"

namespace dnnlab::cli {
namespace {

struct JoinOptions {
  std::string url, token, data_dir, tls_ca;
  bool quiet = false;
  // Tests: SIGKILL this process on receiving its Nth ticket, unanswered (a
  // client that dies mid-step). 0: never.
  int64_t die_at_ticket = 0;
};

// Passes frames through; counts tickets and dies at the chosen one.
class DyingLink : public hybrid::ClientTransport {
 public:
  DyingLink(hybrid::ClientTransport& next, int64_t at) : next_(next), at_(at) {}
  bool send(hybrid::Bytes f) override { return next_.send(std::move(f)); }
  std::optional<hybrid::Bytes> receive(hybrid::Clock::time_point deadline) override {
    auto b = next_.receive(deadline);
    if (b && b->size() > 5 && (*b)[5] == static_cast<uint8_t>(hybrid::FrameKind::kTicket) &&
        ++seen_ == at_)
      ::raise(SIGKILL);
    return b;
  }
  bool closed() const override { return next_.closed(); }
  void close() override { next_.close(); }

 private:
  hybrid::ClientTransport& next_;
  int64_t at_, seen_ = 0;
};

int run_join(const JoinOptions& o) {
  auto link = hybrid_net::ClientLink::join(o.url, o.token, o.tls_ca);
  const hybrid_net::Welcome& w = link->welcome();
  const nn::RunSpec spec = spec::parse_run_spec(w.spec_yaml, "the server's spec");
  if (!o.quiet)
    std::cerr << "joined " << o.url << " as client " << w.client << ": " << spec.name
              << ", loading " << spec.data.dataset << " ...\n";
  const data::Dataset data = data::load(experiment::load_options(spec.data, o.data_dir));
  const std::string mine = hybrid_net::fingerprint(data.train.x.view());
  if (data.train.size() != w.train_rows || mine != w.data_fingerprint)
    throw std::runtime_error(
        "the training split loaded here (" + std::to_string(data.train.size()) +
        " samples, fingerprint " + mine + ") is not the server's (" + std::to_string(w.train_rows) +
        " samples, " + w.data_fingerprint + "): the same data set and --data as the server?");
  DyingLink dying(*link, o.die_at_ticket);
  hybrid::ClientTransport& use =
      o.die_at_ticket > 0 ? static_cast<hybrid::ClientTransport&>(dying) : *link;
  hybrid::ClientOptions co;
  const hybrid::ClientReport r =
      hybrid::run_client(use, spec.model, nn::model_input(spec.model, data.sample_shape),
                         data.num_classes, spec.train.seed, data.train.x.view(), co);
  const std::string reason = link->close_reason();
  if (!r.error.empty() || !reason.empty()) {
    std::cerr << "dnnlab join: " << (r.error.empty() ? "" : r.error + "; ")
              << "the server closed the link: " << (reason.empty() ? "(no reason)" : reason)
              << "\n";
    return 1;
  }
  if (!o.quiet)
    std::cerr << "the run is over: " << r.tickets << " tickets answered, " << r.rows
              << " samples; features forward " << r.forward_seconds << " s, backward "
              << r.backward_seconds << " s, waiting for the server " << r.wait_seconds << " s\n";
  return 0;
}

}  // namespace

Command add_join(CLI::App& app) {
  auto o = std::make_shared<JoinOptions>();
  CLI::App* c = app.add_subcommand(
      "join", "Help train one model as a native client of a distributed `dnnlab train` run");
  c->add_option("url", o->url,
                "The join URL the server printed (ws://HOST:PORT/hybrid, or wss:// when the run "
                "serves TLS)")
      ->required();
  c->add_option("--token", o->token, "The join token the server printed")->required();
  c->add_option(
      "--data", o->data_dir,
      "Data set directory (default: $DNNLAB_DATA_DIR/<name> or /usr/share/datasets/<name>)");
  c->add_option("--tls-ca,--cacert", o->tls_ca,
                "wss:// only: a PEM file with the CA (or the self-signed certificate itself) to "
                "trust for the server's certificate instead of this system's CAs; the "
                "certificate is always verified and must name the URL's host");
  c->add_flag("-q,--quiet", o->quiet, "Print nothing but errors");
  c->add_option("--die-at-ticket", o->die_at_ticket,
                "Tests: kill this process (SIGKILL) on receiving its Nth ticket")
      ->group("");
  return [o] { return run_join(*o); };
}

}  // namespace dnnlab::cli
