// The dashboard's static files: path checks (no `..`, no escaping the root),
// content types, and a built-in page when the dashboard was not built.
#pragma once
#include <string>
#include <string_view>

namespace dnnlab::server {

struct StaticReply {
  unsigned status = 200;  // 200, 400 (bad path) or 404
  std::string content_type;
  std::string body;
};

// Serves `path` (the target without its query) from `web_root`; "/" is
// index.html. Without a built dashboard ("/" and no index.html) it answers a
// small page saying how to build one.
StaticReply serve_static(const std::string& web_root, std::string_view path);

std::string_view content_type_for(std::string_view extension);

}  // namespace dnnlab::server
