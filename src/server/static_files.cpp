// Static file serving for the dashboard bundle.
#include "server/static_files.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace dnnlab::server {
namespace {

constexpr std::string_view kNotBuiltPage = R"(<!doctype html>
<html><head><meta charset="utf-8"><title>dnnlab</title></head>
<body style="font-family: sans-serif; max-width: 40em; margin: 3em auto">
<h1>dnnlab</h1>
<p>The server is running, but the dashboard was not built.</p>
<p>Build it with <code>cd web &amp;&amp; npm ci &amp;&amp; npm run build</code> (or build the
<code>web</code> target with CMake), then start the server with
<code>--web build/web/dist</code>.</p>
<p>The REST API works without it: try <a href="/api/experiments">/api/experiments</a>,
<a href="/api/stats">/api/stats</a> or <a href="/metrics">/metrics</a>.</p>
</body></html>
)";

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Percent-decodes; false on a bad escape or a NUL.
bool url_decode(std::string_view in, std::string& out) {
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (in[i] == '%') {
      if (i + 2 >= in.size()) return false;
      int hi = hex_digit(in[i + 1]), lo = hex_digit(in[i + 2]);
      if (hi < 0 || lo < 0) return false;
      char c = static_cast<char>(hi * 16 + lo);
      if (c == '\0') return false;
      out.push_back(c);
      i += 2;
    } else {
      out.push_back(in[i]);
    }
  }
  return true;
}

}  // namespace

std::string_view content_type_for(std::string_view ext) {
  if (ext == ".html" || ext == ".htm") return "text/html; charset=utf-8";
  if (ext == ".js" || ext == ".mjs") return "text/javascript; charset=utf-8";
  if (ext == ".css") return "text/css; charset=utf-8";
  if (ext == ".json" || ext == ".map") return "application/json";
  if (ext == ".svg") return "image/svg+xml";
  if (ext == ".png") return "image/png";
  if (ext == ".jpg" || ext == ".jpeg") return "image/jpeg";
  if (ext == ".ico") return "image/x-icon";
  if (ext == ".wasm") return "application/wasm";
  if (ext == ".txt") return "text/plain; charset=utf-8";
  if (ext == ".woff2") return "font/woff2";
  return "application/octet-stream";
}

StaticReply serve_static(const std::string& web_root, std::string_view path) {
  namespace fs = std::filesystem;
  const StaticReply bad{400, "text/plain; charset=utf-8", "bad path\n"};
  std::string decoded;
  if (path.empty() || path[0] != '/' || !url_decode(path, decoded)) return bad;
  // Decoded once, checked segment by segment before touching the disk: no
  // empty segment ("//etc" would make the rest absolute), no "." or "..", no
  // backslash, control character or '%' left over from double encoding.
  std::string_view d = std::string_view(decoded).substr(1);
  for (char c : d)
    if (c == '\\' || c == '%' || static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return bad;
  std::size_t start = 0;
  while (start < d.size()) {
    std::size_t end = d.find('/', start);
    if (end == std::string_view::npos) end = d.size();
    std::string_view seg = d.substr(start, end - start);
    const bool last = end == d.size();
    if ((seg.empty() && !last) || seg == "." || seg == "..") return bad;
    start = end + 1;
  }

  std::string rel(d);
  if (rel.empty() || rel.back() == '/') rel += "index.html";
  const bool wants_index = rel == "index.html";
  const StaticReply missing{404, "text/plain; charset=utf-8", "not found\n"};
  std::error_code ec;
  fs::path root = web_root.empty() ? fs::path() : fs::canonical(web_root, ec);
  if (web_root.empty() || ec) {
    if (wants_index) return {200, "text/html; charset=utf-8", std::string(kNotBuiltPage)};
    return missing;
  }
  // The file as the kernel will open it (symlinks resolved) must still lie
  // under the root: a link out of the web root is not served.
  fs::path file = fs::canonical(root / fs::path(rel).relative_path(), ec);
  if (ec || !fs::is_regular_file(file, ec)) {
    if (wants_index) return {200, "text/html; charset=utf-8", std::string(kNotBuiltPage)};
    return missing;
  }
  auto [root_end, file_it] = std::mismatch(root.begin(), root.end(), file.begin(), file.end());
  if (root_end != root.end()) return missing;
  std::ifstream f(file, std::ios::binary);
  std::ostringstream body;
  body << f.rdbuf();
  if (!f) return missing;
  // The bundle's names carry no content hash (app.js, app.css): the server
  // sends them with no-cache, so a rebuilt dashboard shows on the next load.
  return {200, std::string(content_type_for(file.extension().string())), body.str()};
}

}  // namespace dnnlab::server
