// KvPoolPlan: how a KV memory budget becomes a paged pool. The one place that sizes the pool:
// the engine allocates what it says, `kvserve serve` prints it before it starts, and
// `kvserve plan` predicts with it, so all three agree to the byte:
//
//   group_token_bytes = one group's layers' K and V for one token      (kv_geometry's formula)
//   block_bytes       = block_size x group_token_bytes
//   num_blocks        = floor(kv_cache_memory / block_bytes)
//   pool_bytes        = num_blocks x block_bytes
//
// With one group of all layers (every uniform model, and every model with per-layer formats),
// block_bytes = block_size x bytes_per_token: a block holds every layer's K/V for block_size
// tokens. A model with sliding layers has several groups (kv_cache_groups.h) of
// layers_per_group alike layers, and a block holds one group's layers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "kvcache/kv_cache_groups.h"
#include "kvcache/kv_geometry.h"

namespace kvs {

inline constexpr uint32_t kMaxBlockSize = 256;
// Block ids are 32-bit with one value reserved (BlockId::invalid); stay well below.
inline constexpr uint64_t kMaxPoolBlocks = uint64_t{1} << 31;

struct KvPoolPlan {
  KvModelShape shape;  // the model's layers and K/V formats (one rank)
  KvCacheGroups groups;
  KvUniformShape unit;  // the layers of one group: what one block stores per token
  // Every layer's K and V for one token (sliding layers while the sequence is within their
  // window), and the formula with the model's numbers (kv_geometry's text).
  uint64_t bytes_per_token = 0;
  std::string formula;
  uint32_t block_size = 0;
  uint64_t block_bytes = 0;
  uint32_t num_blocks = 0;
  uint64_t pool_bytes = 0;
  // Per-channel K formats: the f16 keys of each sequence's partly filled 16-token group
  // (quant/key_tails.h), one slot per sequence (max_num_seqs) and layer group, taken from the
  // budget before the blocks: key_tail_bytes = slots x layers_per_group x kv_heads x 16 x
  // head_dim x 2. Zero for every other format.
  uint32_t key_tail_slots = 0;
  uint64_t key_tail_bytes = 0;
  // `--kv-recent-window` (quant/recent_window.h): each running sequence's newest tokens in f16
  // (or int8, `--kv-recent-window-dtype`), K and V, one ring per sequence (max_num_seqs) of W + 16
  // tokens for every layer, taken from the budget before the blocks: recent_window_bytes = slots
  // x layers x kv_heads x (W + 16) x row bytes x 2, a row head_dim x 2 B (f16) or head_dim + 2 B
  // (int8). Zero without a window. With `--kv-attention-sink` (quant/attention_sink.h) it also
  // holds the sink's f16 rows: + 2 x slots x layers x kv_heads x head_dim x 2 B x 2.
  uint32_t recent_window = 0;  // W, tokens
  KvDtype recent_window_dtype = KvDtype::kF16;
  uint32_t recent_window_slots = 0;
  bool attention_sink = false;
  uint64_t recent_window_bytes = 0;
  // The max_num_seqs the plan was made for (what a re-plan in another format must reuse).
  uint32_t max_num_seqs = 0;
  // floor(num_blocks / num_groups) x block_size: a sequence of this many tokens always fits
  // the whole pool, whatever its groups hold (for a uniform model: the tokens the pool holds).
  uint64_t num_tokens = 0;
};

// What one sequence of `tokens` tokens holds in the pool at its peak when the engine runs it
// alone: its prompt prefilled in chunks of `prefill_chunk` tokens from position 0 (the engine's
// max_num_batched_tokens), each chunk holding, per group,
//   full group       every block up to the chunk's end: ceil(end / block_size)
//   sliding group    the blocks from the window before the chunk's first position to its end:
//                    ceil(end / block_size) - first_held_block(window, first, block_size)
// i.e. window - 1 tokens before the chunk, the chunk itself, and up to one partly used block on
// each side. Decode steps (chunks of one token) never hold more than the last prefill chunk did
// when prefill_chunk >= block_size. The peak is the largest chunk total; it is what the engine's
// `peak KV bytes in use` reports for that sequence, to the block.
struct KvSequenceFootprint {
  uint64_t tokens = 0;
  uint32_t prefill_chunk = 0;
  std::vector<uint32_t> group_blocks;  // per group, at the peak chunk
  uint64_t blocks = 0;                 // their sum
  uint64_t bytes = 0;                  // blocks x block_bytes
  // The same sequence with every layer held in full (what it would take without windows).
  uint64_t all_full_bytes = 0;
};
[[nodiscard]] KvSequenceFootprint sequence_footprint(const KvPoolPlan& pool, uint64_t tokens,
                                                     uint32_t prefill_chunk);

// invalid_argument, naming the flag, for a block size outside 1..kMaxBlockSize, a head dim the
// formats cannot hold, layers the pool cannot page (KvCacheGroups::of_layers), a budget smaller
// than one block or one with too many blocks.
// max_num_seqs sizes the per-channel keys' tails (0: none) and the recent-token window's rings
// (`recent_window` tokens each; 0: no window; a multiple of 16 up to kMaxRecentWindow), and with
// `attention_sink` (which needs a window) the sink's rows; the rings' rows in
// `recent_window_dtype` (f16 or int8).
[[nodiscard]] Result<KvPoolPlan> plan_kv_pool(const KvModelShape& shape, uint64_t kv_cache_memory,
                                              uint32_t block_size, uint32_t max_num_seqs = 0,
                                              uint32_t recent_window = 0,
                                              bool attention_sink = false,
                                              KvDtype recent_window_dtype = KvDtype::kF16);
// The same without a budget: everything but num_blocks, pool_bytes and num_tokens (0).
[[nodiscard]] Result<KvPoolPlan> plan_kv_layout(const KvModelShape& shape, uint32_t block_size);
// The uniform case.
[[nodiscard]] Result<KvPoolPlan> plan_kv_pool(const KvUniformShape& shape, uint64_t kv_cache_memory,
                                              uint32_t block_size);

}  // namespace kvs
