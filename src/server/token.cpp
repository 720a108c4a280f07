// Bearer token: creation (0600, O_EXCL so two starts never race), reuse, checks.
#include "server/token.hpp"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "tls/random.hpp"

namespace dnnlab::server {
namespace {

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

}  // namespace

std::string random_hex(std::size_t bytes) {
  return tls::random_hex(bytes);
}

LoadedToken load_or_create_token(const std::string& path) {
  namespace fs = std::filesystem;
  if (fs::exists(path)) {
    // A token others can read, or one short enough to guess, guards nothing:
    // refuse it rather than serve with it.
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0)
      throw std::runtime_error("cannot stat token file " + path + ": " + std::strerror(errno));
    if (st.st_mode & 077) {
      char mode[8];
      std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
      throw std::runtime_error("token file " + path + " has mode " + mode +
                               ": group and others must have no access (chmod 600 " + path + ")");
    }
    std::ifstream f(path);
    std::string t;
    std::getline(f, t);
    t = trim(t);
    if (t.empty()) throw std::runtime_error("token file " + path + " is empty");
    if (t.size() < kMinTokenChars)
      throw std::runtime_error("token file " + path + " holds a " + std::to_string(t.size()) +
                               "-character token; at least " + std::to_string(kMinTokenChars) +
                               " are needed (delete the file to have a new one made)");
    return {t, false};
  }
  fs::path p(path);
  if (p.has_parent_path()) fs::create_directories(p.parent_path());
  std::string t = random_hex(32);
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    if (errno == EEXIST) return load_or_create_token(path);  // another start won the race
    throw std::runtime_error("cannot create token file " + path + ": " + std::strerror(errno));
  }
  ::fchmod(fd, 0600);  // whatever the umask
  std::string line = t + "\n";
  bool ok = ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size());
  ::close(fd);
  if (!ok) throw std::runtime_error("cannot write token file " + path);
  return {t, true};
}

std::string default_token_file(std::string_view store_url) {
  namespace fs = std::filesystem;
  constexpr std::string_view kSqlite = "sqlite:";
  if (store_url.substr(0, kSqlite.size()) == kSqlite) {
    fs::path db(std::string(store_url.substr(kSqlite.size())));
    return (db.has_parent_path() ? db.parent_path() / "dnnlab.token" : fs::path("dnnlab.token"))
        .string();
  }
  return "dnnlab.token";
}

std::optional<std::string_view> bearer_credentials(std::string_view authorization) {
  constexpr std::string_view kBearer = "bearer";
  if (authorization.size() <= kBearer.size() || authorization[kBearer.size()] != ' ')
    return std::nullopt;
  for (std::size_t i = 0; i < kBearer.size(); ++i)
    if ((authorization[i] | 0x20) != kBearer[i]) return std::nullopt;
  std::string_view rest = authorization.substr(kBearer.size());
  while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
  if (rest.empty()) return std::nullopt;
  return rest;
}

bool bearer_matches(std::string_view authorization, std::string_view token) {
  auto credentials = bearer_credentials(authorization);
  if (!credentials || credentials->size() != token.size() || token.empty()) return false;
  return CRYPTO_memcmp(credentials->data(), token.data(), token.size()) == 0;
}

}  // namespace dnnlab::server
