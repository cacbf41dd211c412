#include "sim/trace.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <unordered_map>

namespace kvs {

Status validate_trace(const Trace& t) {
  if (t.block_tokens == 0) return invalid_argument("trace block size must be at least 1 token");
  double last = 0;
  for (size_t i = 0; i < t.requests.size(); ++i) {
    const TraceRequest& r = t.requests[i];
    const std::string where = "trace request " + std::to_string(i + 1) + ": ";
    if (!std::isfinite(r.arrival_s) || r.arrival_s < 0)
      return invalid_argument(where + "arrival time must be finite and >= 0");
    if (r.arrival_s < last) return invalid_argument(where + "arrivals are not sorted");
    last = r.arrival_s;
    if (r.input_tokens == 0) return invalid_argument(where + "no prompt tokens");
    if (r.output_tokens == 0) return invalid_argument(where + "no output tokens");
    const uint64_t max_ids = (uint64_t{r.input_tokens} + t.block_tokens - 1) / t.block_tokens;
    if (r.hash_ids.size() > max_ids)
      return invalid_argument(where + std::to_string(r.hash_ids.size()) + " hash ids for " +
                              std::to_string(r.input_tokens) + " prompt tokens (at most " +
                              std::to_string(max_ids) + " blocks of " +
                              std::to_string(t.block_tokens) + ")");
  }
  return Status::ok();
}

Status scale_trace_rate(Trace& t, double rate_scale) {
  if (!(rate_scale > 0) || !std::isfinite(rate_scale))
    return invalid_argument("--rate-scale must be a positive number");
  for (TraceRequest& r : t.requests) r.arrival_s /= rate_scale;
  return Status::ok();
}

Status jitter_trace_arrivals(Trace& t, double jitter_s, uint64_t seed) {
  if (!(jitter_s >= 0) || !std::isfinite(jitter_s))
    return invalid_argument("--arrival-jitter-ms must be a number >= 0");
  if (jitter_s == 0) return Status::ok();
  std::mt19937_64 rng(seed);
  for (TraceRequest& r : t.requests)
    r.arrival_s += jitter_s * static_cast<double>(rng() >> 11) * 0x1.0p-53;  // [0, jitter_s)
  std::stable_sort(
      t.requests.begin(), t.requests.end(),
      [](const TraceRequest& a, const TraceRequest& b) { return a.arrival_s < b.arrival_s; });
  return Status::ok();
}

void truncate_trace(Trace& t, uint64_t max_requests) {
  if (max_requests > 0 && t.requests.size() > max_requests) t.requests.resize(max_requests);
}

namespace {
// A prefix of hash ids as one key: the chain hash of (parent key, id). Collisions would only
// overstate the reported reuse; 64-bit keys over a few million prefixes make them negligible.
uint64_t chain_key(uint64_t parent, uint64_t id) {
  uint64_t x = parent ^ (id + 0x9e3779b97f4a7c15ULL + (parent << 6) + (parent >> 2));
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}
}  // namespace

TraceStats trace_stats(const Trace& t) {
  TraceStats s;
  s.requests = t.requests.size();
  std::unordered_map<uint64_t, uint8_t> seen;  // prefix keys of earlier requests
  for (const TraceRequest& r : t.requests) {
    s.duration_s = std::max(s.duration_s, r.arrival_s);
    s.input_tokens += r.input_tokens;
    s.output_tokens += r.output_tokens;
    s.max_input_tokens = std::max(s.max_input_tokens, r.input_tokens);
    s.max_total_tokens = std::max(s.max_total_tokens, uint64_t{r.input_tokens} + r.output_tokens);
    uint64_t key = 0;
    uint64_t k = 0;
    bool matching = true;
    for (uint64_t id : r.hash_ids) {
      key = chain_key(key, id);
      if (matching && seen.contains(key)) {
        ++k;
      } else {
        matching = false;
        seen.emplace(key, 1);
      }
    }
    s.reused_tokens += std::min<uint64_t>(k * t.block_tokens, r.input_tokens);
  }
  return s;
}

}  // namespace kvs
