// `dnnlab submit SWEEP --server URL`: sends a sweep file to a running server
// (POST /api/experiments) and prints the new experiment's id and page.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/commands.hpp"
#include "nn/errors.hpp"
#include "server/http_client.hpp"

namespace dnnlab::cli {
namespace {

struct SubmitOptions {
  std::string sweep_path;
  std::string server_url = "http://127.0.0.1:8080";
  std::string token;
  std::string token_file;
  std::string cacert;
};

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw SpecError({path, 0, 0}, "", "cannot read the sweep file");
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string resolve_token(const SubmitOptions& o) {
  if (!o.token.empty()) return o.token;
  std::string file = o.token_file;
  if (file.empty()) {
    if (const char* env = std::getenv("DNNLAB_TOKEN")) return env;
    file = "dnnlab.token";
    if (!std::filesystem::exists(file)) return {};
  }
  std::ifstream f(file);
  std::string t;
  if (!std::getline(f, t) || t.empty())
    throw std::runtime_error("--token-file: cannot read a token from " + file);
  while (!t.empty() && (t.back() == '\r' || t.back() == ' ')) t.pop_back();
  return t;
}

int run_submit(const SubmitOptions& o) {
  const std::string spec = read_text(o.sweep_path);
  nlohmann::json body = {{"spec", spec}, {"name", o.sweep_path}};
  auto r = server::http_request(o.server_url, "POST", "/api/experiments", body.dump(),
                                resolve_token(o), o.cacert);
  nlohmann::json j = nlohmann::json::parse(r.body, nullptr, false);
  std::string error = j.is_object() && j.contains("error") ? j["error"].get<std::string>() : r.body;
  if (r.status == 202) {
    std::int64_t id = j["id"];
    std::cout << "submitted " << o.sweep_path << " as experiment " << id << "\n"
              << "  " << o.server_url << "/#/experiments/" << id << "\n";
    return 0;
  }
  if (r.status == 400) {
    std::cerr << "error: " << error << "\n";
    return 2;  // a bad sweep, as for `dnnlab run`
  }
  if (r.status == 401)
    std::cerr << "error: the server refused the token (" << error
              << "); pass --token or --token-file (the server prints where it keeps it)\n";
  else
    std::cerr << "error: server answered " << r.status << ": " << error << "\n";
  return 1;
}

}  // namespace

Command add_submit(CLI::App& app) {
  auto o = std::make_shared<SubmitOptions>();
  CLI::App* c = app.add_subcommand("submit", "Submit a sweep file to a running dnnlab server");
  c->add_option("sweep", o->sweep_path, "Sweep file (YAML); see docs/sweep.md")->required();
  c->add_option("--server", o->server_url, "Server URL (http:// or https://)")
      ->capture_default_str();
  c->add_option("--cacert", o->cacert,
                "PEM file of the CA (or the self-signed certificate) to trust for an https:// "
                "server (default: the system's CAs)")
      ->check(CLI::ExistingFile);
  auto* tok = c->add_option("--token", o->token, "Write token (default: $DNNLAB_TOKEN)");
  c->add_option("--token-file", o->token_file,
                "File holding the write token (default: ./dnnlab.token)")
      ->excludes(tok);
  return [o] { return run_submit(*o); };
}

}  // namespace dnnlab::cli
