// Request counters and latency histograms for /metrics (Prometheus text format).
// Thread-safe: the io thread observes while a reader thread renders /metrics.
#pragma once
#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <tuple>

namespace dnnlab::server {

class HttpMetrics {
 public:
  // `route` is the route pattern ("/api/trials/{id}"), never the raw target,
  // and `method` is one of kMethods or "other" (Beast accepts any token as a
  // method), so the number of series stays bounded whatever clients send.
  void observe(const std::string& method, const std::string& route, unsigned code, double seconds);
  // dnnlab_http_requests_total and dnnlab_http_request_duration_seconds.
  std::string render() const;

  static constexpr std::array<std::string_view, 9> kMethods{
      "GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "CONNECT", "TRACE"};
  // `method` if it is one of kMethods, else "other".
  static std::string_view method_label(std::string_view method);

  static constexpr std::array<double, 12> kBuckets{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                                   0.05,   0.1,   0.25,   0.5,   1.0,  2.5};

 private:
  struct Histogram {
    std::array<std::uint64_t, kBuckets.size()> buckets{};  // non-cumulative
    std::uint64_t count = 0;
    double sum = 0;
  };
  mutable std::mutex mu_;
  std::map<std::tuple<std::string, std::string, unsigned>, std::uint64_t> requests_;
  std::map<std::string, Histogram> durations_;
};

// Escapes a Prometheus label value (backslash, quote, newline).
std::string prom_label(const std::string& value);

}  // namespace dnnlab::server
