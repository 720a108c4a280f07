// `dnnlab serve`: the REST API, the live dashboard and /metrics over a store
// and broker, driving the coordinators of running experiments. Ctrl-C stops it.
#include <unistd.h>

#include <boost/asio/signal_set.hpp>
#include <filesystem>
#include <iostream>

#include "cli/commands.hpp"
#include "cli/sweep_cmds.hpp"
#include "db/backend_url.hpp"
#include "server/server.hpp"

namespace dnnlab::cli {

// The dashboard bundle: $DNNLAB_WEB_DIR, else ../share/dnnlab/web beside an
// installed binary (bin/dnnlab, wherever the prefix was moved), else web/dist
// beside the build tree this binary came from. Only paths relative to the
// binary: nothing of the build tree is baked in.
std::string find_web_root() {
  namespace fs = std::filesystem;
  if (const char* env = std::getenv("DNNLAB_WEB_DIR")) return env;
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return {};
  for (const char* rel : {"../share/dnnlab/web", "../../web/dist", "../web/dist",
                          "../../../../web/dist", "../../../web/dist"})
    if (fs::is_regular_file(exe.parent_path() / rel / "index.html", ec))
      return fs::weakly_canonical(exe.parent_path() / rel, ec).string();
  return {};
}

void add_limit_flags(CLI::App* c, server::ServerOptions& o) {
  c->add_option("--max-connections", o.max_connections,
                "Open connections of every kind; more are answered 503")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  c->add_option("--max-connections-per-ip", o.max_connections_per_ip,
                "Open connections from one remote address; more are answered 503")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  c->add_option("--max-send-queue", o.max_send_queue,
                "Bytes waiting to be sent on one WebSocket before its reader is closed as too slow")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  c->add_option("--allow-origin", o.allow_origins,
                "An origin (scheme://host[:port]) whose pages may open /api/events and /join "
                "(repeatable; the server's own origin always may)");
  c->add_option("--allow-host", o.allow_hosts,
                "A Host name to answer besides localhost, 127.0.0.1 and [::1] (repeatable); "
                "others get 421 on a loopback listener, and on any listener once one is named");
}

void add_tls_flags(CLI::App* c, server::ServerOptions& o) {
  auto* cert = c->add_option("--tls-cert", o.tls_cert,
                             "PEM certificate chain: the port then speaks only HTTPS and WSS "
                             "(TLS 1.2+); needs --tls-key. See docs/security.md for when a "
                             "reverse proxy suits better");
  auto* key = c->add_option("--tls-key", o.tls_key, "PEM private key of --tls-cert");
  cert->needs(key);
  key->needs(cert);
}

namespace {

struct ServeOptions {
  server::ServerOptions server;
  bool private_reads = false;
  std::size_t max_body_kib = 1024;
};

int run_serve(ServeOptions& o) {
  o.server.public_reads = !o.private_reads;
  o.server.max_body = o.max_body_kib * 1024;
  if (o.server.web_root.empty()) o.server.web_root = find_web_root();
  boost::asio::io_context io;
  server::Server srv(io, o.server);
  srv.start();
  boost::asio::signal_set signals(io, SIGINT, SIGTERM);
  signals.async_wait([&](const boost::system::error_code& ec, int) {
    if (!ec) srv.stop();
  });
  // The dashboard URL carries the read token (private reads), never the write token.
  // The store URL without its password (docs/security.md, "Secrets on the terminal").
  std::cout << "dnnlab serving " << srv.dashboard_url() << " (store "
            << backend_url::redact(o.server.store_url) << ")\n";
  if (srv.token_is_new())
    std::cout << "write token (kept in " << srv.token_file() << "): " << srv.token() << "\n";
  if (srv.read_token_is_new())
    std::cout << "read token (kept in " << srv.read_token_file() << "): " << srv.read_token()
              << "\n";
  std::cout << "browsers join at " << srv.join_url() << "\n";
  if (o.server.web_root.empty())
    std::cout << "dashboard not built: see " << srv.url() << "/ for how to build it\n";
  std::cout.flush();
  for (;;) {
    try {
      io.run();
      return 0;
    } catch (const std::exception& e) {
      // Handlers catch their own errors; this is the last line of defence.
      std::cerr << "dnnlab serve: " << e.what() << "\n";
    }
  }
}

}  // namespace

Command add_serve(CLI::App& app) {
  auto o = std::make_shared<ServeOptions>();
  o->server.store_url = "sqlite:dnnlab.db";
  CLI::App* c = app.add_subcommand(
      "serve", "Serve the REST API, the live dashboard and /metrics (see docs/openapi.yaml)");
  c->add_option("--listen", o->server.listen,
                "HOST:PORT to listen on; 127.0.0.1 unless told otherwise (0.0.0.0 for all)")
      ->capture_default_str();
  c->add_option("--store", o->server.store_url,
                "Result store URL (sqlite:PATH, postgres://...); or from $DNNLAB_STORE_URL, which "
                "keeps a password off the command line")
      ->envname(kStoreUrlEnv)
      ->capture_default_str();
  c->add_option("--broker", o->server.broker_url,
                "Task queue URL (sqlite:PATH, amqp[s]://...); default: the store URL; or from "
                "$DNNLAB_BROKER_URL")
      ->envname(kBrokerUrlEnv);
  c->add_option("--web", o->server.web_root,
                "Dashboard files (default: share/dnnlab/web beside the installed binary, or the "
                "build's web/dist)");
  c->add_option("--token-file", o->server.token_file,
                "Where the write token is kept (default: dnnlab.token beside the sqlite store)");
  c->add_flag("--private-reads", o->private_reads,
              "Require a token for reads too: the write token or the read token (made in "
              "dnnlab.read-token beside the write token), which the printed dashboard URL carries");
  c->add_option("--read-token-file", o->server.read_token_file,
                "Where the read token is kept (default: dnnlab.read-token beside the token)");
  add_limit_flags(c, o->server);
  add_tls_flags(c, o->server);
  c->add_option("--max-body-kib", o->max_body_kib, "Largest request body accepted, in KiB")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  c->add_option(
       "--read-threads", o->server.read_threads,
       "Threads (each with its own store connection) answering trial lists; 0: the io thread")
      ->capture_default_str();
  c->add_option("--data", o->server.data_dir,
                "Data set directory for browser shards and re-runs (default: the usual places); "
                "also the data root: sweeps submitted over the REST API may name data files "
                "(data.path, ...) only inside it, and none without it");
  c->add_option("--verify-fraction", o->server.verify_fraction,
                "Least fraction of a trusted browser client's results re-run natively and "
                "compared (0..1); a new client's are all re-run until --trust-after agreed")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  c->add_option("--browser-lease", o->server.browser_lease_seconds,
                "Seconds a browser's ticket stays leased without a heartbeat")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  c->add_option("--join-token-file", o->server.join_token_file,
                "Where the join token is kept (default: dnnlab.join-token beside the token)");
  // Browser gateway limits (docs/protocol.md, "Limits").
  auto& g = o->server.gateway;
  c->add_option("--trust-after", g.trust_after,
                "Browser results all re-run natively before a client is sampled instead")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  c->add_option("--max-pending-verifications", g.max_pending_verifications,
                "Native re-runs queued per browser client before it gets no more tickets "
                "(until it is trusted: the agreements it still lacks)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  c->add_option("--max-unconfirmed-failures", g.max_unconfirmed_failures,
                "Browser failures a re-run did not confirm before the client is quarantined")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  c->add_option("--max-hello-bytes", g.max_hello_bytes, "Largest /join frame before hello")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  c->add_option("--hello-timeout", g.hello_timeout_seconds,
                "Seconds a /join connection may take to say hello")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  c->add_option("--hellos-per-minute", g.hellos_per_minute, "Hellos per minute per address")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  c->add_option("--ticket-lifetime", g.ticket_lifetime_seconds,
                "Seconds a browser ticket lives, however often it is extended")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  c->add_option("--max-tickets-per-client", g.max_tickets_per_client,
                "Tickets one browser identity may hold at once")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  c->add_option("--max-tickets-per-address", g.max_tickets_per_address,
                "Tickets the browsers of one address may hold at once")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  c->add_option("--max-abandons", g.max_abandons,
                "Tickets a browser may abandon in a row before its cooldown")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  c->add_option("--abandon-cooldown", g.abandon_cooldown_seconds,
                "Seconds without tickets after too many abandoned ones")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  c->add_option("--max-abandons-per-address", g.max_abandons_per_address,
                "Tickets the browsers of one address may abandon in a row (across identities) "
                "before the address's cooldown")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  c->add_option("--max-pending-verifications-per-address", g.max_pending_verifications_per_address,
                "Native re-runs queued for the browsers of one address (across identities)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  c->add_option("--max-unconfirmed-failures-per-address", g.max_unconfirmed_failures_per_address,
                "Unconfirmed browser failures from one address before its failures are "
                "refused instead of re-run")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  c->add_option("--max-verify-queue", g.max_verify_queue,
                "Native re-runs queued in all; past it results that need one are refused")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  c->add_option("--verify-top-k", g.verify_top_k,
                "A browser result that would be among the best K counted trials is re-run "
                "before it counts, whatever the client's trust")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  c->add_option("--progress-per-second", g.progress_per_second,
                "Epoch reports per second one browser ticket may send (after a burst of "
                "--progress-burst)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  c->add_option("--progress-burst", g.progress_burst, "Epoch reports one ticket may send at once")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  c->add_option("--gone-worker-ttl", g.gone_worker_ttl_seconds,
                "Seconds the row of a browser worker that left is kept")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  c->add_flag("!--no-coordinators", o->server.run_coordinators,
              "Do not drive running experiments (another process does)");
  return [o] { return run_serve(*o); };
}

}  // namespace dnnlab::cli
