// KeyTails: the f16 keys of the partly filled G-token groups of a per-channel K format
// (quant/kv_channel_groups.h), so that a group filled one token at a time is re-sealed from its
// keys at every token and ends with exactly the bytes it would have had if written at once.
//
// It is a cache, never the data: after every write the pool's group bytes are complete (the
// tokens written so far, sealed over themselves), so swap and the tiers move blocks as before, and
// attention reads only the pool. A tail serves a write only when it holds exactly the rows before
// it, for that layer; otherwise (evicted, or the block was overwritten from elsewhere, which
// invalidates its tails) the rows are decoded back from the group's bytes, one more rounding for
// those tokens. A copy-on-write within the pool copies the tails with the bytes (copy()), so a
// forked sample goes on exactly as its parent would.
//
// A slot holds one layer's rows of one group (a "chunk": slot / G of the pool, G = the format's
// group tokens) for every kv head; each layer has its own `slots` slots, reused least recently
// written first (a write that finds its tail counts). So a write that fills one group and begins
// the next, as a prefill chunk crossing a group boundary does, hands the slot its filled group
// frees in that layer to the new group, and no other sequence's tail is evicted for it. The engine
// sizes it to one slot per sequence per layer group (the last, partly filled group of each),
// counted in the KV memory budget (kv_pool_plan.h), in zero pages (core/zero_pages.h): a slot costs
// memory once a group is written to it. Not thread-safe: write_kv (kernels/kv_write.cpp) makes
// every lookup and update on its calling thread, in order, before the pool's threads fill the rows
// those calls handed out.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "core/zero_pages.h"

namespace kvs {

class KeyTails {
 public:
  // `slots` tails for a pool of `num_chunks` groups of `tokens` rows (kv_channel_group_tokens);
  // resource_exhausted when the system cannot map them.
  static Result<KeyTails> create(uint32_t slots, uint32_t layers, uint32_t kv_heads, uint32_t dim,
                                 uint32_t tokens, uint64_t num_chunks);

  // Slots per layer.
  [[nodiscard]] uint32_t slots() const { return slots_; }
  // f16 bytes of all slots: what the pool budget reserves for them.
  [[nodiscard]] static uint64_t bytes(uint32_t slots, uint32_t layers, uint32_t kv_heads,
                                      uint32_t dim, uint32_t tokens);
  // Rows per group.
  [[nodiscard]] uint32_t tokens() const { return tokens_; }

  // Rows [G][dim] of f16 of (chunk, layer, head) if the chunk's tail holds exactly `rows` rows of
  // that layer, else null. A hit is the writer's: it counts as a write for the reuse order.
  [[nodiscard]] uint16_t* find(uint64_t chunk, uint32_t layer, uint32_t head, uint32_t rows);
  // The chunk's slot in `layer` (taking a free one, else the layer's least recently written one,
  // if it has none). Returns the rows of (layer, head).
  [[nodiscard]] uint16_t* acquire(uint64_t chunk, uint32_t layer, uint32_t head);
  // Records that `layer` of the chunk now holds `rows` rows; G (a full group) frees its slot in
  // that layer.
  void set_rows(uint64_t chunk, uint32_t layer, uint32_t rows);
  // Forgets the tails of chunks [first, end) (their block was overwritten by a copy).
  void invalidate(uint64_t first, uint64_t end);
  // Chunk `dst`, whose bytes were just copied from chunk `src` (copy-on-write of a partly filled
  // block: forked samples), takes a copy of src's tail, every layer's rows and counts, so that
  // it is written on as src would be; no tail when src has none.
  void copy(uint64_t src, uint64_t dst);

  // ---- the groups of the last write ----
  // A query reads the keys of its own group (the G-token group holding its position) in f16, as
  // KIVI reads its recent window, and every earlier group sealed. So what a query sees does not
  // depend on whether its group was written at once or one token at a time, and a sequence's
  // output does not change with how it is chunked, batched or preempted. The f16 rows of every
  // group a write_kv call touched are kept here until the next call (one layer's, which the
  // attention of that layer reads).
  void begin_step_rows();
  // Rows [G][dim] of (chunk, head) of the last write; `create` adds them (the writer).
  [[nodiscard]] uint16_t* step_rows(uint64_t chunk, uint32_t head, bool create);
  [[nodiscard]] const uint16_t* step_rows(uint64_t chunk, uint32_t head) const;
  // The f16 key of token slot `offset` of `block` (a pool of block_size-token blocks) for
  // `head`, if the last write touched its group; else null. What attention reads for a query's
  // own group.
  [[nodiscard]] const uint16_t* step_key(uint64_t block, uint32_t offset, uint32_t block_size,
                                         uint32_t head) const;

  // (layer, slot) pairs holding a chunk (tests and the integrity check).
  [[nodiscard]] uint32_t in_use() const;
  // In every layer, every slot's chunk maps back to it and every mapped chunk's slot holds it.
  [[nodiscard]] bool check_integrity() const;

 private:
  KeyTails(uint32_t slots, uint32_t layers, uint32_t kv_heads, uint32_t dim, uint32_t tokens,
           uint64_t num_chunks, ZeroPages data);
  static constexpr uint8_t kNoRows = 0xFF;
  [[nodiscard]] uint16_t* rows_of(uint32_t slot, uint32_t layer, uint32_t head);
  // Index of (layer, slot) in chunk_of_, stamp_ and rows_; of (chunk, layer) in slot_of_.
  [[nodiscard]] uint64_t at(uint32_t layer, uint32_t slot) const {
    return uint64_t{layer} * slots_ + slot;
  }
  [[nodiscard]] uint64_t of(uint64_t chunk, uint32_t layer) const {
    return chunk * layers_ + layer;
  }
  // The chunk's slot in `layer`, taking a free one or the least recently written one if it has
  // none.
  [[nodiscard]] uint32_t slot_for(uint64_t chunk, uint32_t layer);
  void release(uint32_t layer, uint32_t slot);

  uint32_t slots_, layers_, kv_heads_, dim_, tokens_;
  std::vector<int32_t> slot_of_;   // [num_chunks][layers]: slot or -1
  std::vector<int64_t> chunk_of_;  // [layers][slots]: chunk or -1
  std::vector<uint64_t> stamp_;    // [layers][slots]: last write
  std::vector<uint8_t> rows_;      // [layers][slots]: rows held, kNoRows = none
  ZeroPages data_;                 // u16 [slots][layers][kv_heads][G][dim]
  uint64_t clock_ = 0;
  std::unordered_map<uint64_t, uint32_t> step_index_;  // chunk -> index into step_data_
  std::vector<uint16_t> step_data_;                    // [index][kv_heads][G][dim]
};

}  // namespace kvs
