// capacity_plan: the planner's arithmetic. Given a model's KV shape (kv_geometry), the memory of
// one GPU and a workload, how many requests fit?
//
//   usable     = floor(gpu_memory x utilization)                      (per GPU / TP rank)
//   kv_budget  = usable - ceil(weights / tp) - workspace
//   C_max      = floor(kv_budget / bytes_per_request(context))
//
// where bytes_per_request(N) = sum over layers of token_bytes(layer) x held(layer, N) + states
// + the engine's f16 rows beside the blocks (window, sink, key tails: kv_layer_sequence_bytes in
// kv_geometry.h). Everything is exact integer bytes; no unit conversions happen here (the report
// chooses GB or GiB for display, see size_input.h).
//
// Paging (block_size > 0): each layer's held tokens are rounded up to whole blocks, so a request
// wastes at most one partial block per layer group. A contiguous allocator instead reserves the
// full context for every request, whatever its actual length: that is the expected-case
// comparison.
//
// Windowed layers (kv_geometry.h): by default a request of N tokens holds min(N, window) tokens
// in them (what a one-token decode step needs), rounded up to whole blocks. With
// window_chunk_tokens C > 0 they hold what the engine holds during a step of up to C tokens:
// min(N, window - 1 + C) tokens, in the whole blocks spanning them, and paged at the worst block
// alignment met while the request grows to N (the most blocks of any step ending at m <= N; for
// long requests ceil((window - 2 + C) / block) + 1, which is vLLM's reservation
// cdiv(window - 1 + C, block) + 1 except when window - 1 + C is one more than a multiple of the
// block: then vLLM reserves one block more than any alignment needs).
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "core/status.h"
#include "kvcache/kv_geometry.h"

namespace kvs {

struct PlanWorkload {
  uint64_t context = 0;  // tokens per request in the worst case (every request at full length)
  // Expected case: mean tokens per request, or a distribution of (tokens, weight) pairs. When
  // both are set the distribution wins. Lengths are clamped to `context`.
  std::optional<double> avg_tokens;
  std::vector<std::pair<uint64_t, double>> length_distribution;
  std::optional<uint64_t> concurrency;  // "does this many fit?"
  uint32_t block_size = 16;             // 0 = no paging: exact token counts
  uint64_t shared_prefix = 0;           // tokens every request shares (system prompt)
  // Windowed layers: 0 = min(N, window) tokens rounded up to whole blocks (the default); C > 0 =
  // the engine's hold during a step of up to C tokens (--max-num-batched-tokens): window - 1 + C
  // tokens, in the blocks they span at the worst alignment on the way to N.
  uint64_t window_chunk_tokens = 0;
};

struct PlanInputs {
  KvModelShape shape;             // per-rank shape: dtypes and tp included
  uint64_t gpu_memory_bytes = 0;  // per GPU (one per TP rank)
  double gpu_memory_utilization = 0.9;
  uint64_t weights_bytes = 0;    // the whole model; each rank holds ceil(weights / tp)
  uint64_t workspace_bytes = 0;  // per GPU: activations, CUDA graphs, fragmentation
  PlanWorkload workload;
  // Query heads of the attention (0 = unknown, not checked): tp must divide them, as vLLM
  // requires (ModelConfig.verify_with_parallel_config), or the plan is refused.
  uint32_t query_heads = 0;
};

// All byte counts are per GPU (TP rank) unless named total_*.
struct CapacityPlan {
  KvShapeBytes per_token;        // bytes per token, split by layer kind, with the formula
  KvRequestBytes request;        // one request at `context` tokens, exact token count
  uint64_t request_paged = 0;    // same, each layer rounded up to whole blocks
  uint64_t usable_bytes = 0;     // floor(gpu_memory x utilization)
  uint64_t weights_per_gpu = 0;  // ceil(weights / tp)
  uint64_t kv_budget = 0;        // usable - weights_per_gpu - workspace (0 if negative)
  int64_t kv_budget_signed = 0;  // the same without clamping (negative: weights do not fit)

  // Worst case: every request at `context` (paged).
  uint64_t c_max_worst = 0;
  double c_max_worst_exact = 0;  // kv_budget / request_paged, unrounded
  // Expected case (when avg_tokens or a distribution is given).
  bool has_expected = false;
  double expected_tokens = 0;               // mean request length after clamping
  double expected_request_exact = 0;        // mean bytes per request, exact tokens
  double expected_request_paged = 0;        // mean bytes per request with block rounding
  uint64_t c_max_expected = 0;              // floor(kv_budget / expected_request_paged)
  uint64_t c_max_contiguous = 0;            // contiguous reservation of the full context each
  double paging_waste_per_request = 0;      // expected_request_paged - expected_request_exact
  double contiguous_waste_per_request = 0;  // request.total - expected_request_exact

  // Concurrency verdict (when concurrency is given).
  bool has_concurrency = false;
  uint64_t concurrency = 0;
  uint64_t total_at_concurrency = 0;  // concurrency x request_paged
  bool fits = false;                  // total_at_concurrency <= kv_budget
  // Largest context with which `concurrency` requests fit (or, without concurrency, one
  // request). `context_unbounded` when every KV layer is windowed and it fits at any length.
  uint64_t max_context = 0;
  bool context_unbounded = false;

  // Prefix sharing (when shared_prefix > 0): the prefix's blocks are stored once.
  bool has_prefix = false;
  uint64_t shared_prefix_tokens = 0;  // rounded down to whole blocks
  uint64_t prefix_bytes = 0;          // one copy of the shared prefix at `context`
  uint64_t request_unique_bytes = 0;  // request_paged - prefix_bytes
  uint64_t c_max_with_prefix = 0;     // floor((kv_budget - prefix) / unique)
  uint64_t prefix_freed_bytes = 0;    // (C - 1) x prefix_bytes, C = concurrency or C_max

  // Totals over the tp GPUs.
  uint32_t tp = 1;
  uint64_t total_gpu_memory = 0;
  uint64_t total_kv_budget = 0;
};

// Bytes a request of n tokens holds when each layer's tokens take whole blocks of `block_size`
// (0 = exact): kv_layer_held_slots per layer, with chunk_tokens as in PlanWorkload's
// window_chunk_tokens.
[[nodiscard]] uint64_t kv_request_bytes_paged(const KvModelShape& shape, uint64_t n_tokens,
                                              uint32_t block_size, uint64_t chunk_tokens = 0);

// floor(bytes x utilization), exact for utilizations given to 6 decimals.
[[nodiscard]] uint64_t apply_utilization(uint64_t bytes, double utilization);

// ok when `tp` ranks can split `query_heads` attention heads (tp divides them; 0 heads = unknown);
// otherwise invalid_argument naming the tp values that work.
[[nodiscard]] Status check_query_heads_split(uint32_t query_heads, uint32_t tp);

// Validates the inputs (shape, utilization in (0, 1], context > 0, query heads over tp, ...) and
// computes the plan.
[[nodiscard]] Result<CapacityPlan> plan_capacity(const PlanInputs& in);

}  // namespace kvs
