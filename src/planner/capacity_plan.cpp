#include "planner/capacity_plan.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

namespace kvs {
namespace {

// Largest N in [0, kMaxTokens] with count x paged(N) <= budget; `unbounded` when N = kMaxTokens
// fits (only possible when every KV layer is windowed).
struct MaxContext {
  uint64_t tokens = 0;
  bool unbounded = false;
};
constexpr uint64_t kMaxTokens = uint64_t{1} << 40;

MaxContext max_context_for(const KvModelShape& s, uint32_t block, uint64_t chunk, uint64_t count,
                           uint64_t budget) {
  auto fits = [&](uint64_t n) {
    const unsigned __int128 need =
        static_cast<unsigned __int128>(kv_request_bytes_paged(s, n, block, chunk)) * count;
    return need <= budget;
  };
  if (!fits(0)) return {};  // the per-sequence states and rows alone do not fit
  if (fits(kMaxTokens)) return {.tokens = kMaxTokens, .unbounded = true};
  uint64_t lo = 0, hi = kMaxTokens;  // fits(lo), !fits(hi)
  while (hi - lo > 1) {
    const uint64_t mid = lo + (hi - lo) / 2;
    (fits(mid) ? lo : hi) = mid;
  }
  return {.tokens = lo};
}

// Bytes of the shared prefix [0, prefix) that a request of n tokens holds, summed over layers.
uint64_t prefix_held_bytes(const KvModelShape& s, uint64_t n, uint64_t prefix, uint64_t chunk) {
  uint64_t total = 0;
  for (size_t i = 0; i < s.layers.size(); ++i) {
    const uint64_t held = kv_layer_held_tokens(s.layers[i], n, chunk);  // [n - held, n)
    const uint64_t first = n - held;
    const uint64_t overlap = prefix > first ? std::min(prefix, n) - first : 0;
    total += overlap * kv_layer_token_bytes(s, i);
  }
  return total;
}

Status validate_inputs(const PlanInputs& in) {
  KVS_RETURN_IF_ERROR(validate_kv_shape(in.shape));
  KVS_RETURN_IF_ERROR(check_query_heads_split(in.query_heads, in.shape.tp));
  const PlanWorkload& w = in.workload;
  if (in.gpu_memory_bytes == 0) return invalid_argument("GPU memory must be positive");
  if (!(in.gpu_memory_utilization > 0 && in.gpu_memory_utilization <= 1))
    return invalid_argument("GPU memory utilization must be in (0, 1], got " +
                            std::to_string(in.gpu_memory_utilization));
  if (w.context == 0) return invalid_argument("context must be at least one token");
  if (w.context > kMaxTokens) return invalid_argument("context is implausibly large");
  if (w.block_size > (1u << 20)) return invalid_argument("block size is implausibly large");
  if (w.window_chunk_tokens > (uint64_t{1} << 30))
    return invalid_argument("tokens per step (--max-num-batched-tokens) is implausibly large");
  if (w.concurrency && *w.concurrency == 0)
    return invalid_argument("concurrency must be at least 1");
  if (w.avg_tokens && !(*w.avg_tokens > 0 && std::isfinite(*w.avg_tokens)))
    return invalid_argument("average tokens per request must be positive");
  double weight_sum = 0;
  for (const auto& [tokens, weight] : w.length_distribution) {
    if (tokens == 0 || !(weight >= 0) || !std::isfinite(weight))
      return invalid_argument("length distribution entries need tokens > 0 and weight >= 0");
    weight_sum += weight;
  }
  if (!w.length_distribution.empty() && !(weight_sum > 0))
    return invalid_argument("length distribution has no positive weight");
  if (w.shared_prefix >= w.context && w.shared_prefix != 0)
    return invalid_argument("shared prefix (" + std::to_string(w.shared_prefix) +
                            " tokens) must be shorter than the context (" +
                            std::to_string(w.context) + ")");
  return Status::ok();
}

}  // namespace

Status check_query_heads_split(uint32_t heads, uint32_t tp) {
  if (heads == 0 || tp == 0 || heads % tp == 0) return Status::ok();
  std::string work;
  for (uint32_t t = 1; t <= heads; ++t)
    if (heads % t == 0) work += (work.empty() ? "" : ", ") + std::to_string(t);
  return invalid_argument(std::to_string(heads) + " attention heads cannot be split over tp " +
                          std::to_string(tp) + " (vLLM requires tp to divide them; tp in (" + work +
                          ") works)");
}

uint64_t kv_request_bytes_paged(const KvModelShape& s, uint64_t n, uint32_t block, uint64_t chunk) {
  auto at = [&](uint64_t m) {
    uint64_t total = 0;
    for (size_t i = 0; i < s.layers.size(); ++i) {
      const KvLayer& l = s.layers[i];
      total += kv_layer_token_bytes(s, i) * kv_layer_held_slots(l, m, block, chunk) +
               kv_layer_sequence_bytes(l, s);
    }
    return total;
  };
  if (chunk == 0 || block <= 1) return at(n);
  // Step-aware windows: the blocks a window spans depend on where it starts within a block, so
  // a shorter request can hold one block more than a longer one. Every layer holds at least as
  // much at m + block tokens as at m (full layers one block more, windows the same alignment), so
  // the most a request holds on its way to n tokens is the most over its last `block` lengths.
  uint64_t peak = 0;
  for (uint64_t m = n >= block - 1 ? n - (block - 1) : 0; m <= n; ++m) peak = std::max(peak, at(m));
  return peak;
}

uint64_t apply_utilization(uint64_t bytes, double utilization) {
  const auto ppm = static_cast<uint64_t>(std::llround(utilization * 1e6));
  return static_cast<uint64_t>(static_cast<unsigned __int128>(bytes) * ppm / 1000000u);
}

Result<CapacityPlan> plan_capacity(const PlanInputs& in) {
  KVS_RETURN_IF_ERROR(validate_inputs(in));
  const KvModelShape& s = in.shape;
  const PlanWorkload& w = in.workload;
  CapacityPlan p;
  p.tp = s.tp;
  p.per_token = kv_shape_bytes(s);
  const uint64_t chunk = w.window_chunk_tokens;
  p.request = kv_request_breakdown(s, w.context, chunk);
  p.request_paged = kv_request_bytes_paged(s, w.context, w.block_size, chunk);

  p.usable_bytes = apply_utilization(in.gpu_memory_bytes, in.gpu_memory_utilization);
  p.weights_per_gpu = (in.weights_bytes + s.tp - 1) / s.tp;
  p.kv_budget_signed = static_cast<int64_t>(p.usable_bytes) -
                       static_cast<int64_t>(p.weights_per_gpu) -
                       static_cast<int64_t>(in.workspace_bytes);
  p.kv_budget = p.kv_budget_signed > 0 ? static_cast<uint64_t>(p.kv_budget_signed) : 0;
  p.total_gpu_memory = in.gpu_memory_bytes * s.tp;
  p.total_kv_budget = p.kv_budget * s.tp;

  const uint64_t per_req = std::max<uint64_t>(1, p.request_paged);
  p.c_max_worst = p.kv_budget / per_req;
  p.c_max_worst_exact = static_cast<double>(p.kv_budget) / static_cast<double>(per_req);
  p.c_max_contiguous = p.kv_budget / std::max<uint64_t>(1, p.request.total);

  // Expected case.
  if (!w.length_distribution.empty() || w.avg_tokens) {
    p.has_expected = true;
    double weight_sum = 0, tokens = 0, exact = 0, paged = 0;
    auto add = [&](uint64_t n, double weight) {
      n = std::min(n, w.context);
      weight_sum += weight;
      tokens += weight * static_cast<double>(n);
      exact += weight * static_cast<double>(kv_request_bytes(s, n, chunk));
      paged += weight * static_cast<double>(kv_request_bytes_paged(s, n, w.block_size, chunk));
    };
    if (!w.length_distribution.empty()) {
      for (const auto& [n, weight] : w.length_distribution) add(n, weight);
    } else {
      // A single average is used as every request's length (a point estimate).
      add(std::max<uint64_t>(1, static_cast<uint64_t>(std::llround(*w.avg_tokens))), 1.0);
    }
    p.expected_tokens = tokens / weight_sum;
    p.expected_request_exact = exact / weight_sum;
    p.expected_request_paged = paged / weight_sum;
    p.c_max_expected = static_cast<uint64_t>(
        std::floor(static_cast<double>(p.kv_budget) / std::max(1.0, p.expected_request_paged)));
    p.paging_waste_per_request = p.expected_request_paged - p.expected_request_exact;
    p.contiguous_waste_per_request =
        static_cast<double>(p.request.total) - p.expected_request_exact;
  }

  // Verdict.
  const uint64_t count = w.concurrency.value_or(1);
  if (w.concurrency) {
    p.has_concurrency = true;
    p.concurrency = *w.concurrency;
    const unsigned __int128 total = static_cast<unsigned __int128>(p.request_paged) * count;
    p.total_at_concurrency = total > std::numeric_limits<uint64_t>::max()
                                 ? std::numeric_limits<uint64_t>::max()
                                 : static_cast<uint64_t>(total);
    p.fits = total <= p.kv_budget && p.kv_budget_signed >= 0;
  } else {
    p.fits = p.c_max_worst >= 1;
  }
  const MaxContext mc = max_context_for(s, w.block_size, chunk, count, p.kv_budget);
  p.max_context = mc.tokens;
  p.context_unbounded = mc.unbounded;

  // Prefix sharing: only whole blocks can be shared.
  if (w.shared_prefix > 0) {
    p.has_prefix = true;
    p.shared_prefix_tokens =
        w.block_size == 0 ? w.shared_prefix : w.shared_prefix / w.block_size * w.block_size;
    p.prefix_bytes = prefix_held_bytes(s, w.context, p.shared_prefix_tokens, chunk);
    p.request_unique_bytes = p.request_paged - p.prefix_bytes;
    p.c_max_with_prefix =
        p.kv_budget < p.prefix_bytes
            ? 0
            : (p.kv_budget - p.prefix_bytes) / std::max<uint64_t>(1, p.request_unique_bytes);
    const uint64_t c = w.concurrency ? *w.concurrency : p.c_max_worst;
    p.prefix_freed_bytes = c > 0 ? (c - 1) * p.prefix_bytes : 0;
  }
  return p;
}

}  // namespace kvs
