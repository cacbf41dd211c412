#include "kvcache/kv_pool_plan.h"

#include <algorithm>
#include <string>
#include <vector>

#include "core/byte_size.h"
#include "quant/key_tails.h"
#include "quant/kv_channel_groups.h"
#include "quant/recent_window.h"

namespace kvs {

Result<KvPoolPlan> plan_kv_layout(const KvModelShape& shape, uint32_t block_size) {
  // The pool takes the window and the sink as plan_kv_pool's arguments, for its max_num_seqs
  // sequences; a shape carrying them too (a capacity plan's, per request) would count them twice.
  KVS_CHECK_MSG(shape.recent_window == 0 && !shape.attention_sink,
                "plan_kv_layout: the engine's shape carries no per-request rows");
  if (block_size < 1 || block_size > kMaxBlockSize)
    return invalid_argument("--block-size must be between 1 and " + std::to_string(kMaxBlockSize) +
                            ", got " + std::to_string(block_size));
  if (shape.tp != 1) return invalid_argument("the engine's pool is one rank (tp 1)");
  KVS_RETURN_IF_ERROR(validate_kv_shape(shape));
  KvPoolPlan p;
  p.shape = shape;
  KVS_ASSIGN_OR_RETURN(p.groups, KvCacheGroups::of_layers(shape.layers));
  // A block holds one group's layers, and every group's blocks are alike: layers of their own
  // formats would make the groups' blocks differ in size.
  if (!shape.layer_formats.empty() && p.groups.num_groups() != 1)
    return invalid_argument(
        "per-layer K/V formats (--kv-cache-dtype-k-layers, --kv-cache-dtype-v-layers) need a "
        "model whose layers share one block group; this model's " +
        std::to_string(p.groups.num_groups()) +
        " groups (sliding-window and full-attention layers) hold blocks of one size each");
  const KvLayer& l0 = shape.layers.front();
  p.unit = KvUniformShape{.layers = p.groups.layers_per_group,
                          .kv_heads = l0.kv_heads,
                          .head_dim_k = l0.head_dim_k,
                          .head_dim_v = l0.head_dim_v,
                          .k_dtype = shape.k_dtype,
                          .v_dtype = shape.v_dtype,
                          .layer_formats = shape.layer_formats};
  const KvShapeBytes sb = kv_shape_bytes(shape);
  p.bytes_per_token = sb.bytes_per_token;
  p.formula = sb.formula;
  p.block_size = block_size;
  // A block holds one group's layers (their own formats included), as the storage lays it out.
  p.block_bytes = uint64_t{block_size} * kv_token_bytes(p.unit).bytes_per_token;
  return p;
}

Result<KvPoolPlan> plan_kv_pool(const KvModelShape& shape, uint64_t memory, uint32_t block_size,
                                uint32_t max_num_seqs, uint32_t recent_window, bool attention_sink,
                                KvDtype recent_window_dtype) {
  KVS_ASSIGN_OR_RETURN(KvPoolPlan p, plan_kv_layout(shape, block_size));
  p.max_num_seqs = max_num_seqs;
  KVS_RETURN_IF_ERROR(check_recent_window(recent_window));
  KVS_RETURN_IF_ERROR(check_recent_window_dtype(recent_window_dtype));
  if (attention_sink && recent_window == 0)
    return invalid_argument(
        "--kv-attention-sink needs --kv-recent-window: the sink's rows are read with the window's "
        "(docs/kv-quantization.md)");
  if (recent_window > 0) {
    if (max_num_seqs == 0)
      return invalid_argument("--kv-recent-window needs the number of sequences it holds");
    const KvLayer& l0 = shape.layers.front();
    p.recent_window = recent_window;
    p.recent_window_slots = max_num_seqs;
    p.attention_sink = attention_sink;
    p.recent_window_dtype = recent_window_dtype;
    p.recent_window_bytes =
        RecentWindow::bytes(max_num_seqs, recent_window, static_cast<uint32_t>(shape.layers.size()),
                            l0.kv_heads, l0.head_dim_k, attention_sink, recent_window_dtype);
    if (p.recent_window_bytes >= memory)
      return invalid_argument(
          "--kv-cache-memory " + format_bytes_binary(memory) +
          " does not hold the recent-token window (" + format_thousands(p.recent_window_bytes) +
          " B for " + std::to_string(max_num_seqs) + " sequences of " +
          std::to_string(recent_window) + " + " + std::to_string(kRecentWindowAlign) + " tokens" +
          (attention_sink ? ", and the attention sink" : "") + ")");
    memory -= p.recent_window_bytes;
  }
  if (kv_dtype_per_channel(shape.k_dtype)) {
    const uint32_t group = kv_channel_group_tokens(shape.k_dtype);
    if (block_size % group != 0)
      return invalid_argument(std::string("--kv-cache-dtype-k ") + kv_dtype_name(shape.k_dtype) +
                              " quantizes keys in groups of " + std::to_string(group) +
                              " tokens: --block-size must be a multiple of " +
                              std::to_string(group) + ", got " + std::to_string(block_size));
    p.key_tail_slots = max_num_seqs * p.groups.num_groups();
    p.key_tail_bytes =
        KeyTails::bytes(p.key_tail_slots, p.unit.layers, p.unit.kv_heads, p.unit.head_dim_k, group);
    if (p.key_tail_bytes >= memory)
      return invalid_argument("--kv-cache-memory " + format_bytes_binary(memory) +
                              " does not hold the keys of the partly filled groups (" +
                              format_thousands(p.key_tail_bytes) + " B for " +
                              std::to_string(max_num_seqs) + " sequences)");
    memory -= p.key_tail_bytes;
  }
  const uint64_t blocks = memory / p.block_bytes;
  if (blocks == 0)
    return invalid_argument("--kv-cache-memory " + format_bytes_binary(memory) + " (" +
                            format_thousands(memory) + " B) holds no block: one block of " +
                            std::to_string(block_size) + " tokens needs " +
                            format_thousands(p.block_bytes) + " B");
  if (blocks > kMaxPoolBlocks)
    return invalid_argument("--kv-cache-memory is too large: more than " +
                            format_thousands(kMaxPoolBlocks) + " blocks");
  p.num_blocks = static_cast<uint32_t>(blocks);
  p.pool_bytes = blocks * p.block_bytes;
  p.num_tokens = blocks / p.groups.num_groups() * block_size;
  return p;
}

KvSequenceFootprint sequence_footprint(const KvPoolPlan& pool, uint64_t tokens,
                                       uint32_t prefill_chunk) {
  KVS_CHECK(prefill_chunk > 0 && pool.block_size > 0);
  KVS_CHECK(tokens < (uint64_t{1} << 32));  // positions are 32-bit
  const uint64_t bs = pool.block_size;
  const uint32_t groups = pool.groups.num_groups();
  KvSequenceFootprint f;
  f.tokens = tokens;
  f.prefill_chunk = prefill_chunk;
  f.group_blocks.assign(groups, 0);
  for (uint64_t first = 0; first < tokens; first += prefill_chunk) {
    const uint64_t end = std::min<uint64_t>(tokens, first + prefill_chunk);
    std::vector<uint32_t> held(groups);
    uint64_t total = 0;
    for (uint32_t g = 0; g < groups; ++g) {
      const uint64_t from =
          first_held_block(pool.groups.windows[g], static_cast<uint32_t>(first), pool.block_size);
      held[g] = static_cast<uint32_t>((end + bs - 1) / bs - from);
      total += held[g];
    }
    if (total > f.blocks) {
      f.blocks = total;
      f.group_blocks = held;
    }
  }
  f.bytes = f.blocks * pool.block_bytes;
  f.all_full_bytes = (tokens + bs - 1) / bs * groups * pool.block_bytes;
  return f;
}

Result<KvPoolPlan> plan_kv_pool(const KvUniformShape& shape, uint64_t memory, uint32_t block_size) {
  return plan_kv_pool(KvModelShape::uniform(shape), memory, block_size, 0);
}

}  // namespace kvs
