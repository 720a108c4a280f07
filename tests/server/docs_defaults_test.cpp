// Issue 24, item 7g: docs/security.md states the defaults of every limit.
// This reads its "Limits" table (| flag | default | bounds | over it |) and
// the sentence listing the browser gateway's limits, and compares each
// default with the one the code uses (ServerOptions, GatewayOptions, the
// fixed constants), so that the page cannot drift from the code again. A
// row the test does not know fails too: add it here with its source.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include "server/gateway.hpp"
#include "server/server.hpp"
#include "spec/yaml_reader.hpp"
#include "store/result_store.hpp"

namespace dnnlab::server::testing {
// Named: the unity build puts this file beside others with the same helpers.
namespace docs_defaults {
namespace {

std::string security_md() {
  namespace fs = std::filesystem;
  std::vector<fs::path> candidates;
  if (const char* src = std::getenv("DNNLAB_SOURCE_DIR")) candidates.emplace_back(src);
  candidates.push_back(fs::path(__FILE__).parent_path().parent_path().parent_path());
  for (const auto& root : candidates) {
    std::ifstream f(root / "docs" / "security.md");
    if (!f) continue;
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
  }
  ADD_FAILURE() << "docs/security.md not found (set DNNLAB_SOURCE_DIR)";
  return {};
}

// The text of the section that starts with `heading`, up to the next "## ".
std::string section(const std::string& doc, const std::string& heading) {
  auto start = doc.find(heading);
  if (start == std::string::npos) return {};
  auto end = doc.find("\n## ", start + heading.size());
  return doc.substr(start, end == std::string::npos ? std::string::npos : end - start);
}

std::string bytes(std::size_t n) {
  if (n % (1u << 20) == 0) return std::to_string(n >> 20) + " MiB";
  if (n % 1024 == 0) return std::to_string(n / 1024) + " KiB";
  return std::to_string(n);
}

std::string number(double v) {
  std::ostringstream o;
  o << v;
  return o.str();
}

std::string seconds(double s) {
  if (s >= 3600 && std::fmod(s, 3600) == 0) return number(s / 3600) + " h";
  return number(s) + " s";
}

// 100000 -> "100,000", as the page writes large counts.
std::string with_commas(std::int64_t n) {
  std::string digits = std::to_string(n), out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::string trim(std::string s) {
  while (!s.empty() && s.front() == ' ') s.erase(s.begin());
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

TEST(DocsDefaults, SecurityLimitsTableMatchesTheCode) {
  const ServerOptions so;
  struct Expected {
    std::string flag;    // the first cell
    std::string bounds;  // a piece of the third cell (the "(fixed)" rows share a first cell)
    std::string value;   // the second cell, as the code's default says it
    bool seen = false;
  };
  std::vector<Expected> want = {
      {"`--max-connections`", "", std::to_string(so.max_connections)},
      {"`--max-connections-per-ip`", "", std::to_string(so.max_connections_per_ip)},
      {"`--max-send-queue`", "", bytes(so.max_send_queue)},
      {"`--allow-origin`", "", so.allow_origins.empty() ? "none" : "?"},
      {"`--allow-host`", "", so.allow_hosts.empty() ? "none" : "?"},
      {"`--max-body-kib`", "", std::to_string(so.max_body / 1024)},
      {"(fixed)", "request headers", bytes(kMaxRequestHeaderBytes)},
      {"(fixed)", "`Transfer-Encoding`", "one `chunked`"},
      {"(fixed)", "idle HTTP keep-alive", seconds(kIdleTimeout.count())},
      {"(fixed)",
       "open `/api/events` streams (" + std::to_string(max_event_streams(so)) + " of " +
           std::to_string(so.max_connections) + ")",
       max_event_streams(so) * 2 == so.max_connections ? "half of `--max-connections`" : "?"},
      {"(`ServerOptions::event_idle_seconds`)", "", seconds(so.event_idle_seconds)},
      {"(fixed)", "a frame a dashboard sends", bytes(kMaxEventFrameBytes)},
      {"(fixed)", "a sweep file",
       bytes(spec::detail::kMaxYamlBytes) + ", " + with_commas(spec::detail::kMaxYamlNodes) +
           " nodes"},
      {"`--read-threads`", "", std::to_string(so.read_threads)},
      {"(`ServerOptions::work_threads`)", "", std::to_string(so.work_threads)},
      {"(fixed)", "a trial's weights file", bytes(store::kMaxWeightsBytes)},
  };
  const std::string limits = section(security_md(), "## Limits");
  ASSERT_FALSE(limits.empty());
  std::istringstream lines(limits);
  std::string line;
  int rows = 0;
  while (std::getline(lines, line)) {
    if (line.rfind("| ", 0) != 0 || line.rfind("| flag ", 0) == 0) continue;
    std::vector<std::string> cells;
    std::size_t at = 1;
    for (std::size_t bar; (bar = line.find('|', at)) != std::string::npos; at = bar + 1)
      cells.push_back(trim(line.substr(at, bar - at)));
    ASSERT_GE(cells.size(), 3u) << line;
    ++rows;
    Expected* match = nullptr;
    for (auto& w : want)
      if (w.flag == cells[0] && cells[2].find(w.bounds) != std::string::npos) {
        EXPECT_EQ(match, nullptr) << "two expectations fit: " << line;
        match = &w;
      }
    if (!match) {
      ADD_FAILURE() << "docs/security.md has a limit this test does not know: " << line;
      continue;
    }
    match->seen = true;
    EXPECT_EQ(cells[1], match->value)
        << "docs/security.md says " << cells[0] << " (" << cells[2] << ") defaults to '" << cells[1]
        << "'; the code says '" << match->value << "'";
  }
  EXPECT_EQ(rows, static_cast<int>(want.size()));
  for (const auto& w : want) EXPECT_TRUE(w.seen) << "no row for " << w.flag << " " << w.bounds;
}

TEST(DocsDefaults, SecurityGatewayLimitsSentenceMatchesTheCode) {
  const GatewayOptions g;
  const ServerOptions so;
  std::string doc = security_md();
  const auto start = doc.find("The browser gateway's own limits (");
  ASSERT_NE(start, std::string::npos);
  const auto end = doc.find("are described in", start);
  std::string text = doc.substr(start, end - start);
  for (char& c : text)
    if (c == '\n') c = ' ';
  std::map<std::string, std::string> want = {
      {"--max-hello-bytes", std::to_string(g.max_hello_bytes)},
      {"--hello-timeout", seconds(g.hello_timeout_seconds)},
      {"--hellos-per-minute", std::to_string(g.hellos_per_minute)},
      {"--ticket-lifetime", seconds(g.ticket_lifetime_seconds)},
      {"--max-tickets-per-client", std::to_string(g.max_tickets_per_client)},
      {"--max-tickets-per-address", std::to_string(g.max_tickets_per_address)},
      {"--max-abandons/--abandon-cooldown",
       std::to_string(g.max_abandons) + "/" + seconds(g.abandon_cooldown_seconds)},
      {"--trust-after", std::to_string(g.trust_after)},
      // The server's option is what `dnnlab serve` passes on to the gateway.
      {"--verify-fraction", number(so.verify_fraction)},
      {"--max-pending-verifications", std::to_string(g.max_pending_verifications)},
      {"--max-unconfirmed-failures", std::to_string(g.max_unconfirmed_failures)},
      {"--max-abandons-per-address", std::to_string(g.max_abandons_per_address)},
      {"--verify-top-k", std::to_string(g.verify_top_k)},
      {"--max-pending-verifications-per-address",
       std::to_string(g.max_pending_verifications_per_address)},
      {"--max-verify-queue", std::to_string(g.max_verify_queue)},
      {"--max-unconfirmed-failures-per-address",
       std::to_string(g.max_unconfirmed_failures_per_address)},
      {"--progress-burst", std::to_string(g.progress_burst)},
      {"--progress-per-second", number(g.progress_per_second)},
      {"--gone-worker-ttl", seconds(g.gone_worker_ttl_seconds)},
  };
  // "`--flag` VALUE" or "`--a`/`--b` V1/V2 unit", up to the next comma or ')'.
  std::regex pair(R"(`(--[a-z-]+)`(/`(--[a-z-]+)`)? ([^,()]+))");
  std::map<std::string, std::string> got;
  for (std::sregex_iterator it(text.begin(), text.end(), pair), e; it != e; ++it) {
    std::string flag = (*it)[1];
    if ((*it)[3].matched) flag += "/" + std::string((*it)[3]);
    got[flag] = trim((*it)[4]);
  }
  for (const auto& [flag, value] : want) {
    ASSERT_TRUE(got.count(flag)) << "the sentence lacks " << flag << ": " << text;
    EXPECT_EQ(got[flag], value) << "docs/security.md says " << flag << " " << got[flag]
                                << "; the code says " << value;
  }
  EXPECT_EQ(got.size(), want.size()) << text;
  // "64 MiB binary / 64 KiB text frames after hello"
  EXPECT_NE(text.find(bytes(so.max_join_frame) + " binary / " + bytes(g.max_text_bytes) + " text"),
            std::string::npos)
      << text;
}

}  // namespace
}  // namespace docs_defaults
}  // namespace dnnlab::server::testing
