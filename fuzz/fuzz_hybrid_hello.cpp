// The hybrid protocol's text messages (src/hybrid_net/protocol.hpp): the
// hello and welcome parsers either accept or throw ProtocolError, nothing
// else; what they accept prints back to a message they accept again; a
// close reason never exceeds the WebSocket limit.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "hybrid_net/protocol.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace hn = dnnlab::hybrid_net;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const hn::Hello h = hn::parse_hello(text);
    const hn::Hello again = hn::parse_hello(hn::to_json(h));
    if (again.token != h.token || again.identity.client != h.identity.client ||
        again.identity.secret != h.identity.secret)
      std::abort();
  } catch (const hn::ProtocolError&) {
  }
  try {
    const hn::Welcome w = hn::parse_welcome(text);
    const hn::Welcome again = hn::parse_welcome(hn::to_json(w));
    if (again.spec_yaml != w.spec_yaml || again.secret != w.secret) std::abort();
  } catch (const hn::ProtocolError&) {
  }
  if (hn::close_reason(text).size() > hn::kMaxCloseReason) std::abort();
  return 0;
}
