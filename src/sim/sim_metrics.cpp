#include "sim/sim_metrics.h"

#include <algorithm>
#include <cmath>

namespace kvs {

Percentiles percentiles(std::vector<double> v) {
  Percentiles p;
  if (v.empty()) return p;
  std::sort(v.begin(), v.end());
  p.count = v.size();
  double sum = 0;
  for (double x : v) sum += x;
  p.mean = sum / static_cast<double>(v.size());
  auto at = [&](double q) {
    const double k = (static_cast<double>(v.size()) - 1) * q;
    const size_t lo = static_cast<size_t>(std::floor(k));
    const size_t hi = std::min(lo + 1, v.size() - 1);
    return v[lo] + (v[hi] - v[lo]) * (k - static_cast<double>(lo));
  };
  p.p50 = at(0.5);
  p.p90 = at(0.9);
  p.p99 = at(0.99);
  p.max = v.back();
  return p;
}

SimSummary summarize(std::span<const ReplicaResult> replicas, uint32_t num_blocks) {
  SimSummary s;
  s.replicas = static_cast<uint32_t>(replicas.size());
  std::vector<double> ttft, tpot, e2e;
  double first_arrival = -1;
  double last_finish = 0;
  for (const ReplicaResult& rr : replicas) {
    for (const RequestRecord& r : rr.records) {
      ++s.requests;
      if (first_arrival < 0 || r.arrival_s < first_arrival) first_arrival = r.arrival_s;
      if (r.rejected) {
        ++s.rejected;
        continue;
      }
      if (!r.completed()) continue;
      ++s.completed;
      s.input_tokens += r.input_tokens;
      s.output_tokens += r.output_tokens;
      s.requests_preempted += r.preemptions > 0 ? 1 : 0;
      last_finish = std::max(last_finish, r.finish_s);
      ttft.push_back(r.first_token_s - r.arrival_s);
      e2e.push_back(r.finish_s - r.arrival_s);
      if (r.output_tokens > 1)
        tpot.push_back((r.finish_s - r.first_token_s) / (r.output_tokens - 1));
    }
    s.prefix_query_tokens += rr.cache.prefix_query_tokens;
    s.prefix_hit_tokens += rr.cache.prefix_hit_block_tokens;
    s.prefix_partial_tokens += rr.cache.prefix_hit_tokens - rr.cache.prefix_hit_block_tokens;
    s.evictions += rr.cache.evictions;
    s.prompt_tokens_computed += rr.prompt_tokens_computed;
    s.preemptions_recompute += rr.preemptions_recompute;
    s.preemptions_swap += rr.preemptions_swap;
    s.steps += rr.num_steps;
  }
  if (first_arrival < 0) first_arrival = 0;
  s.makespan_s = std::max(0.0, last_finish - first_arrival);
  if (s.makespan_s > 0) {
    s.requests_per_s = static_cast<double>(s.completed) / s.makespan_s;
    s.input_tokens_per_s = static_cast<double>(s.input_tokens) / s.makespan_s;
    s.output_tokens_per_s = static_cast<double>(s.output_tokens) / s.makespan_s;
  }
  s.ttft_s = percentiles(std::move(ttft));
  s.tpot_s = percentiles(std::move(tpot));
  s.e2e_s = percentiles(std::move(e2e));
  s.prefix_cache_hit_rate =
      s.prefix_query_tokens == 0
          ? 0
          : static_cast<double>(s.prefix_hit_tokens) / static_cast<double>(s.prefix_query_tokens);
  // Time-weighted concurrency and occupancy.
  double busy = 0, compute_bound = 0;
  for (const ReplicaResult& rr : replicas) {
    double running = 0, waiting = 0, kv = 0;
    for (const StepSample& st : rr.steps) {
      const double dt = st.end_s - st.start_s;
      running += st.running * dt;
      waiting += st.waiting * dt;
      kv += static_cast<double>(st.blocks_in_use) / num_blocks * dt;
      s.running_max = std::max(s.running_max, st.running);
      s.waiting_max = std::max(s.waiting_max, st.waiting);
      s.kv_in_use_max =
          std::max(s.kv_in_use_max, static_cast<double>(st.blocks_in_use) / num_blocks);
      if (st.tokens > 0) {
        busy += dt;
        if (st.compute_bound) compute_bound += dt;
      }
    }
    if (s.makespan_s > 0) {
      s.running_mean += running / s.makespan_s;
      s.waiting_mean += waiting / s.makespan_s;
      s.kv_in_use_mean += kv / s.makespan_s / static_cast<double>(replicas.size());
    }
  }
  if (s.makespan_s > 0 && !replicas.empty())
    s.busy_fraction = busy / (s.makespan_s * static_cast<double>(replicas.size()));
  s.compute_bound_fraction = busy > 0 ? compute_bound / busy : 0;
  return s;
}

std::vector<SeriesPoint> time_series(std::span<const ReplicaResult> replicas, uint32_t num_blocks,
                                     double makespan_s, size_t buckets) {
  std::vector<SeriesPoint> out;
  if (buckets == 0 || !(makespan_s > 0)) return out;
  const double width = makespan_s / static_cast<double>(buckets);
  out.resize(buckets);
  for (size_t b = 0; b < buckets; ++b) {
    out[b].start_s = width * static_cast<double>(b);
    out[b].end_s = width * static_cast<double>(b + 1);
  }
  const double n = static_cast<double>(replicas.size());
  for (const ReplicaResult& rr : replicas) {
    for (const StepSample& st : rr.steps) {
      // Spread the sample's constant values over the buckets it overlaps.
      size_t b = std::min(buckets - 1, static_cast<size_t>(std::max(0.0, st.start_s / width)));
      out[b].preempted_recompute += st.preempted_recompute;
      out[b].preempted_swap += st.preempted_swap;
      for (; b < buckets && out[b].start_s < st.end_s; ++b) {
        const double overlap =
            std::min(st.end_s, out[b].end_s) - std::max(st.start_s, out[b].start_s);
        if (overlap <= 0) continue;
        const double f = overlap / width;
        out[b].running += st.running * f;
        out[b].waiting += st.waiting * f;
        out[b].kv_in_use += static_cast<double>(st.blocks_in_use) / num_blocks * f / n;
        out[b].kv_cached_free += static_cast<double>(st.blocks_cached_free) / num_blocks * f / n;
      }
    }
  }
  return out;
}

}  // namespace kvs
