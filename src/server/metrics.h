// ServerMetrics: the numbers behind GET /metrics, rendered in the Prometheus text format
// (counters end in _total, base units: seconds, tokens, bytes; every name starts kvserve_).
// Request-level observations come from the engine thread, HTTP-level counters from handler
// threads; one mutex guards everything (observations are a few per token).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace kvs {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds)
      : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}
  void observe(double v);
  // Appends the _bucket/_sum/_count lines; `labels` is "" or `k="v",...` (no braces).
  void render(const std::string& name, const std::string& labels, std::string* out) const;

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket, not cumulative; last = +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

// A gauge/counter snapshot of the engine and cache, taken on the engine thread.
struct EngineSnapshot {
  uint64_t running = 0, waiting = 0, swapped = 0;
  uint64_t blocks_total = 0, blocks_free = 0, blocks_cached_free = 0, blocks_in_use = 0;
  double usage = 0, fragmentation = 0;
  uint64_t prefix_query_tokens = 0, prefix_hit_tokens = 0;
  uint64_t preemptions_recompute = 0, preemptions_swap = 0;
  uint64_t swap_used_bytes = 0, swap_space_bytes = 0;
  uint64_t pool_bytes = 0, block_bytes = 0;
  uint64_t evictions = 0;
  struct Tenant {
    std::string label;  // short hash of the salt, never the salt
    uint64_t query_tokens = 0, hit_tokens = 0, blocks_held = 0;
  };
  std::vector<Tenant> tenants;
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

  [[nodiscard]] std::string render(const EngineSnapshot& snap) const;

  // The label of a prompt length in the TTFT histogram.
  [[nodiscard]] static const char* prompt_bucket(uint32_t prompt_tokens);

 private:
  static constexpr int kPromptBuckets = 4;
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

// 12 hex digits of a 64-bit FNV-1a hash: a stable, short, non-reversible tenant label.
[[nodiscard]] std::string tenant_label(const std::string& cache_salt);

}  // namespace kvs
