// Prometheus text exposition for the server's own request metrics.
#include "server/metrics.hpp"

#include <sstream>

namespace dnnlab::server {

std::string prom_label(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == '\\' || c == '"') out.push_back('\\');
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out.push_back(c);
  }
  return out;
}

std::string_view HttpMetrics::method_label(std::string_view method) {
  for (std::string_view m : kMethods)
    if (m == method) return m;
  return "other";
}

void HttpMetrics::observe(const std::string& method, const std::string& route, unsigned code,
                          double seconds) {
  std::lock_guard lock(mu_);
  ++requests_[{std::string(method_label(method)), route, code}];
  Histogram& h = durations_[route];
  ++h.count;
  h.sum += seconds;
  for (std::size_t i = 0; i < kBuckets.size(); ++i)
    if (seconds <= kBuckets[i]) {
      ++h.buckets[i];
      break;
    }
}

std::string HttpMetrics::render() const {
  std::lock_guard lock(mu_);
  std::ostringstream o;
  o.precision(9);
  o << "# HELP dnnlab_http_requests_total HTTP requests served, by method, route and status.\n"
       "# TYPE dnnlab_http_requests_total counter\n";
  for (const auto& [key, n] : requests_) {
    const auto& [method, route, code] = key;
    o << "dnnlab_http_requests_total{method=\"" << prom_label(method) << "\",route=\""
      << prom_label(route) << "\",code=\"" << code << "\"} " << n << "\n";
  }
  o << "# HELP dnnlab_http_request_duration_seconds Time to answer a request, by route.\n"
       "# TYPE dnnlab_http_request_duration_seconds histogram\n";
  for (const auto& [route, h] : durations_) {
    std::uint64_t cumulative = 0;
    const std::string r = prom_label(route);
    for (std::size_t i = 0; i < kBuckets.size(); ++i) {
      cumulative += h.buckets[i];
      o << "dnnlab_http_request_duration_seconds_bucket{route=\"" << r << "\",le=\"" << kBuckets[i]
        << "\"} " << cumulative << "\n";
    }
    o << "dnnlab_http_request_duration_seconds_bucket{route=\"" << r << "\",le=\"+Inf\"} "
      << h.count << "\n";
    o << "dnnlab_http_request_duration_seconds_sum{route=\"" << r << "\"} " << h.sum << "\n";
    o << "dnnlab_http_request_duration_seconds_count{route=\"" << r << "\"} " << h.count << "\n";
  }
  return o.str();
}

}  // namespace dnnlab::server
