// ServerMetrics: the numbers behind GET /metrics, rendered in the Prometheus text format
// (counters end in _total, base units: seconds, tokens, bytes; every name starts kvserve_).
// Request-level observations come from the engine thread, HTTP-level counters from handler
// threads; one mutex guards everything (observations are a few per token).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/siphash.h"
#include "engine/engine.h"
#include "server/kv_event_publisher.h"

namespace kvs {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds)
      : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}
  void observe(double v);
  // Appends the _bucket/_sum/_count lines; `labels` is "" or `k="v",...` (no braces).
  void render(const std::string& name, const std::string& labels, std::string* out) const;

  // The q-quantile (0 <= q <= 1) estimated from the buckets as Prometheus' histogram_quantile
  // does: the bucket holding rank q x count, linear between its bounds (the first bucket starts
  // at 0); a rank in the +Inf bucket gives the highest finite bound. Only as exact as the
  // buckets; nullopt with no observation.
  [[nodiscard]] std::optional<double> quantile(double q) const;
  [[nodiscard]] const std::vector<double>& bounds() const { return bounds_; }
  [[nodiscard]] const std::vector<uint64_t>& counts() const { return counts_; }
  [[nodiscard]] uint64_t count() const { return count_; }
  [[nodiscard]] double sum() const { return sum_; }

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket, not cumulative; last = +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

// What /metrics renders of the engine: its snapshot (engine.h, taken on the engine thread) and
// the per-tenant series.
struct TenantSeries {
  std::string label;  // TenantLabeler::label, never the salt
  uint64_t query_tokens = 0, hit_tokens = 0, blocks_held = 0;
};

struct MetricsSnapshot {
  EngineSnapshot engine;
  // At most ServerMetrics' max_tenant_series named tenants (those holding the most blocks,
  // then the most active); the rest are summed into one entry labelled "other".
  std::vector<TenantSeries> tenants;
  std::optional<KvEventPublisherStats> kv_events;  // with --kv-events-endpoint
  uint64_t kv_views_taken = 0;  // KV views taken on the engine thread (KvViewCache)
};

// The label of a prefix-cache namespace (api_keys.h: cache_namespace) in /metrics and /v1/kv:
//   no tenant, no salt      "none"
//   no tenant, salt s       12 hex digits of SipHash(s) under a random per-process key
//   tenant t, no salt       t                (the name from --api-keys, or key:<hex> for a bare
//                                             --api-key)
//   tenant t, salt s        t/<12 hex digits of SipHash(s)>
// Labels are stable for the life of the process and cannot be inverted or precomputed offline
// (the key never leaves the process), unlike an unkeyed hash of an easy salt.
class TenantLabeler {
 public:
  TenantLabeler() : key_(SipKey::random()) {}
  explicit TenantLabeler(const SipKey& key) : key_(key) {}
  [[nodiscard]] std::string label(std::string_view cache_namespace) const;

 private:
  SipKey key_;
};

// Keeps the `max_named` tenants holding the most blocks (ties: most queried tokens, then
// label) and sums the rest into one tenant labelled "other" (appended last, only if any).
[[nodiscard]] std::vector<TenantSeries> cap_tenant_series(std::vector<TenantSeries> tenants,
                                                          size_t max_named);

// A copy of the request-level histograms and per-route counters (for the dashboard).
struct MetricsSummary {
  static constexpr int kPromptBuckets = 4;
  std::vector<Histogram> ttft;  // [kPromptBuckets], by prompt length (prompt_bucket_name)
  Histogram itl{{}};
  Histogram length_fraction{{}};
  struct Route {
    std::string route;
    uint64_t query_tokens = 0, hit_tokens = 0;
  };
  std::vector<Route> routes;
};

class ServerMetrics {
 public:
  ServerMetrics();

  // A request reached its first token: time to first token (from arrival) by prompt length.
  void observe_ttft(double seconds, uint32_t prompt_tokens);
  void observe_inter_token(double seconds);
  // A request finished: end-to-end latency, per-route prefix-cache use, token counts and, per
  // sample, its tokens (prompt + generated) as a fraction of max_model_len.
  void observe_finished(const std::string& route, double e2e_seconds, uint32_t prompt_tokens,
                        uint32_t cached_tokens, uint32_t generated_tokens,
                        const std::vector<double>& length_fractions, const std::string& reason);
  void count_http(const std::string& route, int status);

  [[nodiscard]] std::string render(const MetricsSnapshot& snap) const;
  [[nodiscard]] MetricsSummary summary() const;

  // The label of a prompt length in the TTFT histogram.
  [[nodiscard]] static const char* prompt_bucket(uint32_t prompt_tokens);
  // The label of TTFT histogram i (0 <= i < kPromptBuckets): "1-127", "128-511", ...
  [[nodiscard]] static const char* prompt_bucket_name(int i);

 private:
  static constexpr int kPromptBuckets = MetricsSummary::kPromptBuckets;
  mutable std::mutex mu_;
  std::array<Histogram, kPromptBuckets> ttft_;
  Histogram itl_;
  Histogram e2e_;
  Histogram length_fraction_;
  uint64_t prompt_tokens_ = 0, generation_tokens_ = 0;
  struct RouteCounters {
    uint64_t query_tokens = 0, hit_tokens = 0;
  };
  std::map<std::string, RouteCounters> routes_;
  std::map<std::string, uint64_t> finished_;              // by finish reason
  std::map<std::pair<std::string, int>, uint64_t> http_;  // (route, status)
};

}  // namespace kvs
