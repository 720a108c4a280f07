// `dnnlab join URL --token T [--tls-ca FILE]`: a native client of a hybrid run served by
// `dnnlab train --distributed --listen` in another process or on another
// machine. It gets the run spec from the server, loads (and caches) the
// training split itself, checks it is the server's by fingerprint, and
// trains the model's `features` part on the tickets it is given. A lost link
// is resumed with the client's identity (--reconnect), which
// --identity-file keeps for a later process.
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>
#include <random>
#include <thread>

#include "cli/commands.hpp"
#include "experiment/training_run.hpp"
#include "hybrid/client.hpp"
#include "hybrid_net/client_link.hpp"
#include "hybrid_net/identity_file.hpp"
#include "spec/run_spec.hpp"

namespace dnnlab::cli {
namespace {

struct JoinOptions {
  std::string url, token, data_dir, tls_ca, identity_file;
  bool quiet = false;
  // Tries at reconnecting after a lost link; 0: a lost link ends join.
  int reconnect = 10;
  // Tests: SIGKILL this process on receiving its Nth ticket, unanswered (a
  // client that dies mid-step). 0: never.
  int64_t die_at_ticket = 0;
  int64_t send_delay_ms = 0;
};

// Exit codes of join beyond main's (docs/errors.md).
constexpr int kExitIdentityRefused = 7;  // the server refused to resume this client's identity
constexpr int kExitGaveUp = 8;           // the link was lost and --reconnect tries failed
constexpr int kMaxReconnect = 1000;

// Pauses before reconnect try k (1-based): 0.5 s doubling to 10 s, each
// drawn from its upper half (jitter, so that clients cut at once do not
// come back at once).
std::chrono::milliseconds backoff(int k, std::mt19937& rng) {
  const double ceiling = std::min(10000.0, 500.0 * std::pow(2.0, std::min(k - 1, 10)));
  return std::chrono::milliseconds(
      static_cast<int64_t>(std::uniform_real_distribution<double>(0.5, 1.0)(rng) * ceiling));
}

// Passes frames through to the link of the moment; for tests, counts
// tickets across links and dies at the chosen one, and holds each frame it
// sends for a while (so that this client answers after the others).
class TestLink : public hybrid::ClientTransport {
 public:
  TestLink(hybrid::ClientTransport* next, int64_t die_at, int64_t send_delay_ms)
      : next_(next), at_(die_at), delay_(send_delay_ms) {}
  void reroute(hybrid::ClientTransport* next) { next_ = next; }
  bool send(hybrid::Bytes f) override {
    if (delay_ > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay_));
    return next_->send(std::move(f));
  }
  std::optional<hybrid::Bytes> receive(hybrid::Clock::time_point deadline) override {
    auto b = next_->receive(deadline);
    if (b && b->size() > 5 && (*b)[5] == static_cast<uint8_t>(hybrid::FrameKind::kTicket) &&
        ++seen_ == at_)
      ::raise(SIGKILL);
    return b;
  }
  bool closed() const override { return next_->closed(); }
  void close() override { next_->close(); }

 private:
  hybrid::ClientTransport* next_;
  int64_t at_, delay_, seen_ = 0;
};

// Joins again as `id` after a lost link (`why`), up to o.reconnect tries.
// nullptr with `*exit_code` set when it ends join: the server refused the
// identity (anything but 1013, "try again later"), or no try got through.
std::unique_ptr<hybrid_net::ClientLink> reconnect(const JoinOptions& o,
                                                  const hybrid_net::Identity& id,
                                                  const std::string& why, int* exit_code) {
  std::mt19937 rng(std::random_device{}());
  std::string last = why;
  for (int k = 1; k <= o.reconnect; ++k) {
    const auto pause = backoff(k, rng);
    if (!o.quiet)
      std::cerr << "dnnlab join: the link is lost (" << last << "); reconnecting as client "
                << id.client << " in " << pause.count() / 1000.0 << " s (try " << k << " of "
                << o.reconnect << ")\n";
    std::this_thread::sleep_for(pause);
    try {
      auto link = hybrid_net::ClientLink::join(o.url, o.token, o.tls_ca,
                                               std::chrono::milliseconds(10000), id);
      if (!o.quiet)
        std::cerr << "dnnlab join: reconnected as client " << link->welcome().client
                  << "; the run goes on\n";
      return link;
    } catch (const hybrid_net::Refused& e) {
      if (e.code() != 1013) {  // quarantined, forgotten, a broken rule: trying again won't help
        std::cerr << "dnnlab join: the server refused to resume client " << id.client << ": "
                  << e.what() << "\n";
        *exit_code = kExitIdentityRefused;
        return nullptr;
      }
      last = e.what();
    } catch (const std::exception& e) {  // cannot connect, no welcome in time
      last = e.what();
    }
  }
  std::cerr << "dnnlab join: the link was lost and " << o.reconnect << " tr"
            << (o.reconnect == 1 ? "y" : "ies") << " at reconnecting failed; the last: " << last
            << "\n";
  *exit_code = kExitGaveUp;
  return nullptr;
}

// The first link: as the identity kept in --identity-file, if any.
std::unique_ptr<hybrid_net::ClientLink> first_link(const JoinOptions& o, int* exit_code) {
  std::optional<hybrid_net::Identity> kept;
  try {
    if (!o.identity_file.empty()) kept = hybrid_net::read_identity_file(o.identity_file, o.token);
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
  if (!kept) return hybrid_net::ClientLink::join(o.url, o.token, o.tls_ca);
  try {
    return hybrid_net::ClientLink::join(o.url, o.token, o.tls_ca, std::chrono::milliseconds(10000),
                                        *kept);
  } catch (const hybrid_net::Refused& e) {
    // 1013: its last process is still connected as far as the server knows.
    if (e.code() == 1013 && o.reconnect > 0) return reconnect(o, *kept, e.what(), exit_code);
    std::cerr << "dnnlab join: the server refused to resume client " << kept->client << " of "
              << o.identity_file << ": " << e.what()
              << " (delete the file to join as a new client)\n";
    *exit_code = kExitIdentityRefused;
    return nullptr;
  }
}

int run_join(const JoinOptions& o) {
  int exit_code = 1;
  std::unique_ptr<hybrid_net::ClientLink> link = first_link(o, &exit_code);
  if (!link) return exit_code;
  if (!o.identity_file.empty())
    hybrid_net::write_identity_file(o.identity_file, o.token, link->identity());
  const hybrid_net::Welcome w = link->welcome();
  const hybrid_net::Identity id = link->identity();
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
  TestLink testing(link.get(), o.die_at_ticket, o.send_delay_ms);
  const bool test_link = o.die_at_ticket > 0 || o.send_delay_ms > 0;
  hybrid::ClientOptions co;
  hybrid::ClientReport total;
  while (true) {
    hybrid::ClientTransport& use =
        test_link ? static_cast<hybrid::ClientTransport&>(testing) : *link;
    // A new link holds no weights: a fresh features part, which the
    // server's weights overwrite before its first ticket.
    const hybrid::ClientReport r =
        hybrid::run_client(use, spec.model, nn::model_input(spec.model, data.sample_shape),
                           data.num_classes, spec.train.seed, data.train.x.view(), co);
    total.tickets += r.tickets;
    total.rows += r.rows;
    total.forward_seconds += r.forward_seconds;
    total.backward_seconds += r.backward_seconds;
    total.wait_seconds += r.wait_seconds;
    const std::string reason = link->close_reason();
    if (r.error.empty() && link->lost() && o.reconnect > 0) {
      link = reconnect(o, id, reason, &exit_code);
      if (!link) return exit_code;
      if (link->welcome().client != id.client ||
          link->welcome().data_fingerprint != w.data_fingerprint)
        throw std::runtime_error("the server resumed client " + std::to_string(id.client) +
                                 " as client " + std::to_string(link->welcome().client) +
                                 " of another run (data fingerprint " +
                                 link->welcome().data_fingerprint + ")");
      testing.reroute(link.get());
      continue;
    }
    if (!r.error.empty() || !reason.empty()) {
      std::cerr << "dnnlab join: " << (r.error.empty() ? "" : r.error + "; ")
                << "the server closed the link: " << (reason.empty() ? "(no reason)" : reason)
                << "\n";
      return 1;
    }
    break;
  }
  if (!o.quiet)
    std::cerr << "the run is over: " << total.tickets << " tickets answered, " << total.rows
              << " samples; features forward " << total.forward_seconds << " s, backward "
              << total.backward_seconds << " s, waiting for the server " << total.wait_seconds
              << " s\n";
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
  c->add_option("--reconnect", o->reconnect,
                "After a lost link (a reset, an end without the run's end): reconnect as the "
                "same client up to N times, pausing 0.5 s doubling to 10 s (jittered) before "
                "each; 0: a lost link ends join (exit 1). Exit 8 when all N fail, 7 when the "
                "server refuses the identity (quarantined, forgotten)")
      ->check(CLI::Range(0, kMaxReconnect))
      ->default_val(10);
  c->add_option("--identity-file", o->identity_file,
                "Keep the identity the run issues this client in this file (mode 0600, written "
                "after the welcome), and resume the one in it when it is this run's: a "
                "restarted join is the same client. A file group or others may read is refused");
  c->add_flag("-q,--quiet", o->quiet, "Print nothing but errors (and no reconnect lines)");
  c->add_option("--die-at-ticket", o->die_at_ticket,
                "Tests: kill this process (SIGKILL) on receiving its Nth ticket")
      ->group("");
  c->add_option("--send-delay-ms", o->send_delay_ms,
                "Tests: hold each frame this client sends for this many ms")
      ->check(CLI::Range(0, 10000))
      ->group("");
  return [o] { return run_join(*o); };
}

}  // namespace dnnlab::cli
