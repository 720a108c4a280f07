// Files of secrets that must be the owner's alone: a server's private key
// (--tls-key), a client's identity file (`dnnlab join --identity-file`).
//
//   dnnlab::tls::check_private("--identity-file", path);  // throws unless mode 0600 or stricter
#pragma once
#include <string>

namespace dnnlab::tls {

// Throws std::invalid_argument naming `flag` and the file (and the chmod that
// fixes it) when group or others may access it (any of mode 077), or it
// cannot be stat'ed.
void check_private(const std::string& flag, const std::string& file);

}  // namespace dnnlab::tls
