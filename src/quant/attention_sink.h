// AttentionSink: position 0's K and V of each running sequence kept in f16, every layer
// (`--kv-attention-sink`, beside the recent-token window of quant/recent_window.h), so that a
// quantized pool's queries read the first key and value exactly.
//
// Why position 0: in most LLMs the first token takes a large share of every later query's
// attention (the "attention sink" of StreamingLLM; in SmolLM2's last layers 37-73% of it), so the
// rounding of its key and value is a large part of a 2-bit cache's error
// (docs/kv-quantization.md).
//
// Why rows keyed by the token: position 0 attends only to itself, so its K and V in every layer
// are a function of its token id alone (the forward pass is batch-invariant, and with the sink
// the query at position 0 reads its own key and value in f16 however long its prompt is). A
// sequence that computed position 0 keeps its rows in its slot and publishes them into a table
// entry of its first token; a sequence whose first block came from the prefix cache (or a tier)
// adopts the rows of its first token's entry. Either way it reads the same bytes, so outputs do
// not depend on what the cache held. Which token each entry holds, and which copies a step makes,
// is accounting: kvcache/start_token_table.h decides (the scheduler grants a prefix hit only
// while the table knows the first token), and this class moves the bytes it is told to.
//
// Storage: `slots` rows for the running sequences and as many table entries, each
// [layers][kv_heads][dim] f16 for K and again for V:
//   bytes = 2 x slots x layers x kv_heads x dim x 2 B x 2 (K and V)
// counted in the KV budget with the window's rings (kv_pool_plan.h). Not thread-safe for writes;
// attention's threads only read.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "core/zero_pages.h"

namespace kvs {

class AttentionSink {
 public:
  // resource_exhausted when the system cannot map the rows.
  static Result<AttentionSink> create(uint32_t slots, uint32_t layers, uint32_t kv_heads,
                                      uint32_t dim);
  [[nodiscard]] static uint64_t bytes(uint32_t slots, uint32_t layers, uint32_t kv_heads,
                                      uint32_t dim);

  // ---- a slot's rows ----
  // Row [dim] f16 of `layer`, `head` (the slot's rows must be valid).
  [[nodiscard]] const uint16_t* key(uint32_t slot, uint32_t layer, uint32_t head) const;
  [[nodiscard]] const uint16_t* value(uint32_t slot, uint32_t layer, uint32_t head) const;
  // The slot's sequence computes position 0 in this step: its rows become valid, filled layer by
  // layer (store) before any later step reads them.
  void begin_rows(uint32_t slot) { valid_[slot] = 1; }
  void store(uint32_t slot, uint32_t layer, uint32_t head, const uint16_t* k, const uint16_t* v);
  [[nodiscard]] bool valid(uint32_t slot) const { return valid_[slot] != 0; }
  void reset_slot(uint32_t slot) { valid_[slot] = 0; }
  void copy_slot(uint32_t src, uint32_t dst);

  // ---- the start-token table's entries (kvcache/start_token_table.h decides which) ----
  // The slot takes the entry's rows (written by an earlier publish).
  void adopt(uint32_t slot, uint32_t entry);
  // The slot's rows (valid: its sequence computed position 0) go into the entry.
  void publish(uint32_t slot, uint32_t entry);
  [[nodiscard]] uint32_t slots() const { return slots_; }

 private:
  AttentionSink(uint32_t slots, uint32_t layers, uint32_t kv_heads, uint32_t dim, ZeroPages rows);
  // Row r (0 .. slots-1: the slots; slots .. 2 slots-1: the table's entries), K or V.
  [[nodiscard]] uint16_t* rows(uint32_t r, bool v) const;
  void copy_rows(uint32_t from, uint32_t to);

  uint32_t slots_, layers_, kv_heads_, dim_;
  uint64_t per_row_;            // layers x kv_heads x dim
  ZeroPages rows_;              // K: [2 slots][layers][kv_heads][dim], then V alike
  std::vector<uint8_t> valid_;  // per row (slots, then entries): written
};

}  // namespace kvs
