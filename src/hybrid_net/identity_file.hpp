// A native client's identity kept on disk (`dnnlab join --identity-file
// PATH`), so that a restarted `dnnlab join` resumes the identity the run
// issued it (docs/distributed.md "Identities"). One JSON object:
// {"run":"16 hex","client":ID,"secret":"64 hex"}, where `run` is the first
// 8 bytes of SHA-256 of the join token: a file from another run is not
// presented, and the token itself is not stored. Written with mode 0600
// through a temporary file renamed over it; read only when no one but its
// owner may access it.
//
//   auto kept = hybrid_net::read_identity_file(path, token);  // nullopt: none for this run
//   auto link = hybrid_net::ClientLink::join(url, token, ca, 10s, kept.value_or(Identity{}));
//   hybrid_net::write_identity_file(path, token, link->identity());
#pragma once
#include <optional>
#include <string>

#include "hybrid_net/protocol.hpp"

namespace dnnlab::hybrid_net {

// The identity kept in `path` for the run of `token`; nullopt when there is
// no file or it is another run's. Throws std::invalid_argument naming
// --identity-file when the file is open to group or others, or is not an
// identity file.
std::optional<Identity> read_identity_file(const std::string& path, const std::string& token);

// Replaces `path` with `id` for the run of `token` (mode 0600). Throws
// std::runtime_error naming --identity-file when it cannot be written.
void write_identity_file(const std::string& path, const std::string& token, const Identity& id);

}  // namespace dnnlab::hybrid_net
