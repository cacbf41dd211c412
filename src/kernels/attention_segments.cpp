#include "kernels/attention_segments.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <numeric>

#include "core/check.h"
#include "quant/recent_window.h"

namespace kvs {

int32_t attention_first_key(const PagedAttentionArgs& a, int64_t t) {
  return a.window == 0 ? 0 : std::max<int32_t>(0, a.context_len[t] - int32_t(a.window));
}

int32_t attention_recent_key(const PagedAttentionArgs& a, int64_t t) {
  const int32_t n = a.context_len[t];
  if (a.kv.recent == nullptr) return n;
  return std::max(attention_first_key(a, t), a.kv.recent->first_position(t, n));
}

bool attention_reads_sink(const PagedAttentionArgs& a, int64_t t) {
  return a.kv.recent != nullptr &&
         a.kv.recent->reads_sink(t, attention_first_key(a, t), a.context_len[t]);
}

// With a sink, position 0 first (one key, read like the window); the pool's keys of token t,
// [first, recent): segments of kAttentionSegment keys; then the window's, [recent, n), in segments
// of kAttentionSegment keys too, so that a long window is spread over the threads like the pool
// (one segment of 400 rows was a 2-thread step's critical path: 14% slower at 16K on Gemma 3).
int32_t attention_segments(const PagedAttentionArgs& a, int64_t t) {
  const int32_t n = a.context_len[t];
  const int32_t recent = attention_recent_key(a, t);
  const int32_t sink = attention_reads_sink(a, t) ? 1 : 0;
  const int32_t pool =
      (recent - attention_first_key(a, t) - sink + kAttentionSegment - 1) / kAttentionSegment;
  const int32_t window = (n - recent + kAttentionSegment - 1) / kAttentionSegment;
  return sink + std::max<int32_t>(1 - sink, pool + window);
}

KeyRange attention_segment_keys(const PagedAttentionArgs& a, int64_t t, int32_t seg) {
  const int32_t n = a.context_len[t];
  const int32_t recent = attention_recent_key(a, t);
  int32_t first = attention_first_key(a, t);
  if (attention_reads_sink(a, t)) {
    if (seg == 0) return {0, 1, true};
    first += 1;
    seg -= 1;
  }
  const int32_t pool = (recent - first + kAttentionSegment - 1) / kAttentionSegment;
  if (seg >= pool && recent < n) {
    const int32_t w = recent + (seg - pool) * kAttentionSegment;
    return {w, std::min(n, w + kAttentionSegment), true};
  }
  first += seg * kAttentionSegment;
  return {std::min(recent, first), std::min(recent, first + kAttentionSegment)};
}

namespace {

// The physical blocks holding keys [first, end) of token t: logical blocks first/bs..(end-1)/bs.
struct BlockSpan {
  const uint32_t* ids;
  int32_t count;
};
BlockSpan blocks_of(const PagedAttentionArgs& a, int64_t t, KeyRange k) {
  const int32_t bs = static_cast<int32_t>(a.kv.block_size);
  const int32_t b0 = k.first / bs, b1 = (k.end - 1) / bs + 1;
  return {a.block_table[t] + b0, b1 - b0};
}

bool same_blocks(const PagedAttentionArgs& a, int64_t t, int64_t u, KeyRange k) {
  if (a.block_table[t] == a.block_table[u]) return true;  // one sequence's tokens
  const BlockSpan x = blocks_of(a, t, k), y = blocks_of(a, u, k);
  return std::equal(x.ids, x.ids + x.count, y.ids);
}

uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
  h *= 0xBF58476D1CE4E5B9ull;
  return h ^ (h >> 31);
}

uint64_t hash_segment(const PagedAttentionArgs& a, int64_t t, KeyRange k) {
  uint64_t h = mix(uint64_t(uint32_t(k.first)), uint64_t(uint32_t(k.end)));
  const BlockSpan s = blocks_of(a, t, k);
  for (int32_t i = 0; i < s.count; ++i) h = mix(h, s.ids[i]);
  return h;
}

// Splits the n >= 2 candidates cand[members[..]] into ceil(n / kMaxSharers) groups of near-equal
// size (each of at least 2 members), each group's keys its members' union (an exact group's
// members all have the same keys).
template <typename Candidate>
void add_groups(const std::vector<Candidate>& cand, const std::vector<size_t>& members, bool causal,
                const std::vector<int64_t>& first_segment, SharedSegmentPlan* plan) {
  const size_t n = members.size();
  const size_t groups = (n + SharedSegmentPlan::kMaxSharers - 1) / SharedSegmentPlan::kMaxSharers;
  size_t m = 0;
  for (size_t g = 0; g < groups; ++g) {
    const size_t size = n / groups + (g < n % groups ? 1 : 0);
    SharedSegmentPlan::Group grp{.keys = KeyRange{INT32_MAX, INT32_MIN},
                                 .first = static_cast<uint32_t>(plan->tokens.size()),
                                 .count = static_cast<uint32_t>(size),
                                 .causal = causal};
    for (size_t k = 0; k < size; ++k, ++m) {
      const auto& x = cand[members[m]];
      plan->tokens.push_back(x.token);
      plan->segments.push_back(x.segment);
      plan->shared[static_cast<size_t>(first_segment[x.token] + x.segment)] = 1;
      grp.keys.first = std::min(grp.keys.first, x.keys.first);
      grp.keys.end = std::max(grp.keys.end, x.keys.end);
    }
    plan->groups.push_back(grp);
  }
}

// Exact groups from plan->candidates (the segments of tokens with 2+ segments).
void plan_exact_groups(const PagedAttentionArgs& a, const std::vector<int64_t>& first_segment,
                       SharedSegmentPlan* plan) {
  auto& cand = plan->candidates;
  std::sort(cand.begin(), cand.end(), [](const auto& x, const auto& y) {
    if (x.hash != y.hash) return x.hash < y.hash;
    return x.token < y.token;
  });
  std::vector<size_t> members;
  for (size_t i = 0; i < cand.size();) {
    size_t e = i + 1;
    while (e < cand.size() && cand[e].hash == cand[i].hash) ++e;
    // The run's candidates that truly match its first one (a hash collision stays unshared).
    members.clear();
    const auto& lead = cand[i];
    for (size_t c = i; c < e; ++c) {
      const auto& x = cand[c];
      if (x.keys.first == lead.keys.first && x.keys.end == lead.keys.end &&
          (c == i || same_blocks(a, lead.token, x.token, lead.keys)))
        members.push_back(c);
    }
    if (members.size() >= 2) add_groups(cand, members, /*causal=*/false, first_segment, plan);
    i = e;
  }
}

// Causal groups from the segments the exact groups left: runs of (table, segment index) in token
// order whose first keys stay within kCausalSpread of the run's first.
void plan_causal_groups(const PagedAttentionArgs& a, const std::vector<int64_t>& first_segment,
                        SharedSegmentPlan* plan) {
  auto& cand = plan->candidates;
  cand.clear();
  // A group's members share a table, and one token has one segment of each index: a token whose
  // table no other token of the call has cannot be in one (the decode tokens of a mixed step), so
  // its segments are not listed.
  auto& tables = plan->tables;
  tables.assign(a.block_table, a.block_table + a.num_tokens);
  std::sort(tables.begin(), tables.end(), std::less<>());
  auto shares_table = [&](int64_t t) {
    const auto r = std::equal_range(tables.begin(), tables.end(), a.block_table[t], std::less<>());
    return r.second - r.first >= 2;
  };
  const bool channel_keys = kv_dtype_per_channel(a.kv.k_dtype);
  for (int64_t t = 0; t < a.num_tokens; ++t) {
    if (!shares_table(t)) continue;
    const int32_t ns = attention_segments(a, t);
    for (int32_t s = 0; s < ns; ++s) {
      if (plan->shared[static_cast<size_t>(first_segment[t] + s)] != 0) continue;
      const KeyRange k = attention_segment_keys(a, t, s);
      if (k.recent || k.end <= k.first) continue;
      if (channel_keys && k.end == a.context_len[t]) continue;  // its own group, in f16
      cand.push_back({0, t, s, k});
    }
  }
  auto table = [&](int64_t t) { return reinterpret_cast<uintptr_t>(a.block_table[t]); };
  std::sort(cand.begin(), cand.end(), [&](const auto& x, const auto& y) {
    if (table(x.token) != table(y.token)) return table(x.token) < table(y.token);
    if (x.segment != y.segment) return x.segment < y.segment;
    return x.token < y.token;
  });
  std::vector<size_t> members;
  for (size_t i = 0; i < cand.size();) {
    size_t e = i + 1;
    while (e < cand.size() && table(cand[e].token) == table(cand[i].token) &&
           cand[e].segment == cand[i].segment &&
           std::abs(cand[e].keys.first - cand[i].keys.first) <= SharedSegmentPlan::kCausalSpread)
      ++e;
    if (e - i >= 2) {
      members.resize(e - i);
      std::iota(members.begin(), members.end(), i);
      add_groups(cand, members, /*causal=*/true, first_segment, plan);
    }
    i = e;
  }
}

}  // namespace

void plan_shared_segments(const PagedAttentionArgs& a, const std::vector<int64_t>& first_segment,
                          bool causal, SharedSegmentPlan* plan) {
  plan->groups.clear();
  plan->tokens.clear();
  plan->segments.clear();
  auto& cand = plan->candidates;
  cand.clear();
  const int64_t T = a.num_tokens;
  const bool channel_keys = kv_dtype_per_channel(a.kv.k_dtype);
  for (int64_t t = 0; t < T; ++t) {
    const int32_t ns = attention_segments(a, t);
    if (ns < 2) continue;
    for (int32_t s = 0; s < ns; ++s) {
      const KeyRange k = attention_segment_keys(a, t, s);  // never empty with 2+ segments
      // Per-channel keys: a token reads its own 16-token group in f16 (quant/key_tails.h), so
      // its last segment, which holds that group, is read its own way and never shared.
      if (channel_keys && k.end == a.context_len[t]) continue;
      if (k.recent) continue;  // the window is each sequence's own
      cand.push_back({hash_segment(a, t, k), t, s, k});
    }
  }
  plan->shared.assign(static_cast<size_t>(first_segment[T]), 0);
  if (cand.size() >= 2) plan_exact_groups(a, first_segment, plan);
  if (causal) plan_causal_groups(a, first_segment, plan);
}

bool SharedSegmentPlan::integrity_ok(const PagedAttentionArgs& a,
                                     const std::vector<int64_t>& first_segment) const {
  if (tokens.size() != segments.size()) return false;
  if (shared.size() != static_cast<size_t>(first_segment[a.num_tokens])) return false;
  std::vector<uint8_t> seen(shared.size(), 0);
  size_t next = 0;
  for (const Group& g : groups) {
    if (g.first != next || g.count < 2 || g.count > kMaxSharers) return false;
    if (g.keys.end <= g.keys.first) return false;
    next += g.count;
    if (next > tokens.size()) return false;
    KeyRange hull{INT32_MAX, INT32_MIN};
    for (uint32_t i = g.first; i < g.first + g.count; ++i) {
      const int64_t t = tokens[i];
      if (t < 0 || t >= a.num_tokens) return false;
      if (i > g.first && tokens[i - 1] >= t) return false;
      const int32_t s = segments[i];
      const int32_t ns = attention_segments(a, t);
      if ((!g.causal && ns < 2) || s < 0 || s >= ns) return false;
      const KeyRange k = attention_segment_keys(a, t, s);
      if (g.causal) {
        if (k.recent || k.end <= k.first || k.first < g.keys.first || k.end > g.keys.end)
          return false;
        if (a.block_table[t] != a.block_table[tokens[g.first]]) return false;
        hull = {std::min(hull.first, k.first), std::max(hull.end, k.end)};
      } else {
        if (k.first != g.keys.first || k.end != g.keys.end) return false;
        if (!same_blocks(a, tokens[g.first], t, k)) return false;
      }
      uint8_t& mark = seen[static_cast<size_t>(first_segment[t] + s)];
      if (mark != 0) return false;
      mark = 1;
    }
    if (g.causal && (hull.first != g.keys.first || hull.end != g.keys.end)) return false;
  }
  return next == tokens.size() && seen == shared;
}

}  // namespace kvs
