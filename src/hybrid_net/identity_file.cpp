// `dnnlab join --identity-file`: the identity on disk, private to its owner.
#include "hybrid_net/identity_file.hpp"

#include <fcntl.h>
#include <openssl/sha.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "tls/private_file.hpp"
#include "tls/random.hpp"

namespace dnnlab::hybrid_net {
namespace {

constexpr const char* kFlag = "--identity-file";

// Names the run without storing its token.
std::string run_of(const std::string& token) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(token.data()), token.size(), digest);
  return tls::hex(std::string_view(reinterpret_cast<const char*>(digest), 8));
}

}  // namespace

std::optional<Identity> read_identity_file(const std::string& path, const std::string& token) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::nullopt;
  tls::check_private(kFlag, path);
  std::ifstream f(path);
  std::stringstream text;
  text << f.rdbuf();
  const auto j = nlohmann::json::parse(text.str(), nullptr, false);
  const auto bad = [&](const std::string& why) {
    return std::invalid_argument(std::string(kFlag) + " " + path + ": " + why +
                                 " (not an identity file written by dnnlab join? delete it to "
                                 "join as a new client)");
  };
  if (!j.is_object()) throw bad("not a JSON object");
  if (!j.contains("run") || !j["run"].is_string()) throw bad("no \"run\"");
  if (!j.contains("client") || !j["client"].is_number_integer() || j["client"].get<int64_t>() < 0 ||
      j["client"].get<int64_t>() > 1 << 30)
    throw bad("no \"client\" id");
  if (!j.contains("secret") || !j["secret"].is_string() ||
      j["secret"].get<std::string>().size() != 2 * kSecretBytes)
    throw bad("no \"secret\" of 64 hex digits");
  if (j["run"].get<std::string>() != run_of(token)) return std::nullopt;
  return Identity{j["client"].get<int>(), j["secret"].get<std::string>()};
}

void write_identity_file(const std::string& path, const std::string& token, const Identity& id) {
  const std::string text =
      nlohmann::json{{"run", run_of(token)}, {"client", id.client}, {"secret", id.secret}}.dump() +
      "\n";
  const std::string tmp = path + ".tmp";
  ::unlink(tmp.c_str());  // one left by a process that died writing it
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0)
    throw std::runtime_error(std::string(kFlag) + " " + path + ": cannot create " + tmp + ": " +
                             std::strerror(errno));
  ::fchmod(fd, 0600);  // whatever the umask
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  const bool synced = ::fsync(fd) == 0;
  ::close(fd);
  if (!ok || !synced || ::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    throw std::runtime_error(std::string(kFlag) + " " + path + ": cannot write it");
  }
}

}  // namespace dnnlab::hybrid_net
