// RecentWindow: the last tokens of each running sequence kept in f16, K and V, for every layer
// (`--kv-recent-window`), as KIVI keeps its recent tokens in full precision while the older ones
// are read from the quantized pool. The pool still holds every token in its format; the window is
// a second copy that attention reads instead, for the newest positions.
//
// What a query reads in f16 is a function of its sequence's tokens and its own position only, so
// outputs do not depend on chunking, batching, preemption or what the prefix cache holds:
//
//   floor(seq)     = the sequence's window floor: (B - W) rounded down to a multiple of 16, or 0,
//                    where B is the last position the prefix cache may hand over (the prompt
//                    length - 1, or a scored prompt's first scored position) and W the window
//   window(q)      = [max(floor, group(q) - W), q] for a query at position q >= floor, where
//                    group(q) = q rounded down to a multiple of 16; none below the floor
//
// The engine caps prefix hits at the floor, so every position a window covers was computed by
// the sequence itself, in this life: a hit hands over quantized bytes only, and those positions
// are read quantized by every run. And only the blocks below a sequence's own floor become
// prefix-cache entries: the positions above it were computed reading the window, so their bytes
// (in the layers after the first) are not what another sequence, whose floor lies above them,
// would compute. Every query that gives logits (the last prompt token, each
// decode step, a scored position) has a full window of W to W + 15 tokens. Preemption recomputes
// (the window is not swapped); a fork copies its parent's slot.
//
// Storage: one slot per sequence the engine may run (max_num_seqs), each a ring of W + 16 rows per
// layer and KV head, row = position % (W + 16), plus this step's rows (one layer at a time):
//   bytes = slots x layers x kv_heads x (W + 16) x row bytes x 2 (K and V)
// counted in the KV budget (kv_pool_plan.h). A row is f16 (head_dim x 2 B), or with
// `--kv-recent-window-dtype int8` the int8 format's (head_dim + 2 B: int8 elements and their f16
// scale, quant/kv_codecs.h), about half: a window twice as long for the same bytes. The sink's
// rows stay f16, and so does position 0 wherever a sink keeps it. Per layer the forward pass calls
// store() (the step's new K and V, before attention), attention reads key()/value(), then commit()
// moves the step's rows into the rings. The ring holds every row a window can reach back to before
// the step's chunk: a chunk starting at p has queries reaching back to p - 15 - W.
//
// Keys are stored after RoPE, both in the model's own space (not rotated for the Hadamard
// formats). The rings are ZeroPages (core/zero_pages.h): a slot costs memory once a sequence
// writes it. Not thread-safe for writes; attention's threads only read.
//
// With an attention sink (quant/attention_sink.h) every query of a sequence whose window does not
// reach back to position 0 also reads position 0 in f16 (reads_sink), from the sink's rows: its
// first visible key, unless a sliding window has moved past it.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include <memory>

#include "core/status.h"
#include "core/zero_pages.h"
#include "quant/attention_sink.h"
#include "quant/kv_format.h"

namespace kvs {

inline constexpr uint32_t kRecentWindowAlign = 16;
inline constexpr uint32_t kMaxRecentWindow = 4096;

// A row of the window as attention reads it: its bytes and their format (f16, or int8 with its
// f16 scale after the elements; the sink's rows are f16).
struct WindowRow {
  const uint8_t* bytes;
  KvDtype dtype;
};
// The row's head_dim values.
void window_row_to_f32(const WindowRow& row, uint32_t dim, float* out);
// invalid_argument naming `--kv-recent-window-dtype` unless `dtype` is f16 or int8.
[[nodiscard]] Status check_recent_window_dtype(KvDtype dtype);
// The flag's value as a format: f16 or int8, else that invalid_argument.
[[nodiscard]] Result<KvDtype> parse_recent_window_dtype(std::string_view name);

class RecentWindow {
 public:
  // `slots` rings of `tokens` (a multiple of 16, at most kMaxRecentWindow) + 16 rows per layer
  // and KV head, and with `sink` an attention sink of `slots` sequences; resource_exhausted when
  // the system cannot map them.
  // Rows in `rows` (f16 or int8, check_recent_window_dtype).
  static Result<RecentWindow> create(uint32_t slots, uint32_t tokens, uint32_t layers,
                                     uint32_t kv_heads, uint32_t dim, bool sink = false,
                                     KvDtype rows = KvDtype::kF16);

  // What `slots` rings (and the sink's rows) cost (kv_pool_plan.h takes it from the budget).
  [[nodiscard]] static uint64_t bytes(uint32_t slots, uint32_t tokens, uint32_t layers,
                                      uint32_t kv_heads, uint32_t dim, bool sink = false,
                                      KvDtype rows = KvDtype::kF16);
  // The floor for a sequence whose cache reuse may reach position `boundary` (see above).
  [[nodiscard]] static uint32_t floor_of(uint32_t boundary, uint32_t tokens);

  [[nodiscard]] uint32_t tokens() const { return tokens_; }
  [[nodiscard]] uint32_t slots() const { return slots_; }
  [[nodiscard]] uint32_t capacity() const { return cap_; }
  [[nodiscard]] KvDtype row_dtype() const { return dtype_; }

  // ---- one forward pass ----
  // Per token of the step: its position, its sequence's slot (-1: no window) and floor. A
  // sequence's tokens are consecutive in the batch (one chunk per sequence).
  void begin_step(int64_t num_tokens, const int32_t* positions, const int32_t* slots,
                  const int32_t* floors);
  // The step's K and V of one layer, [num_tokens][kv_heads][dim] f32 (K after RoPE).
  void store(const float* k, const float* v);
  // After that layer's attention: its rows go into their sequences' rings.
  void commit(uint32_t layer);

  // The first position token t reads in f16 when it sees `context_len` positions; context_len
  // when it reads none.
  [[nodiscard]] int32_t first_position(int64_t t, int32_t context_len) const;
  // Whether token t, whose first visible key is `first_key`, reads position 0 from the sink: there
  // is one, the token's sequence holds a slot, position 0 is visible and the window does not
  // already cover it. key() and value() of position 0 then give the sink's rows.
  [[nodiscard]] bool reads_sink(int64_t t, int32_t first_key, int32_t context_len) const {
    return sink_ != nullptr && slot_[t] >= 0 && first_key == 0 &&
           first_position(t, context_len) > 0;
  }
  // Whether the position `back` before token t of the step is position 0 of a sequence with an
  // attention sink (its key is then left out of its per-channel group's range: kv_write.cpp).
  [[nodiscard]] bool sink_behind(int64_t t, uint32_t back) const {
    return sink_ != nullptr && slot_[t] >= 0 && pos_[t] == static_cast<int32_t>(back);
  }
  // The attention sink, or nullptr (the model runner copies its rows as the cache manager's
  // start-token table says: kvcache/start_token_table.h).
  [[nodiscard]] AttentionSink* sink() const { return sink_.get(); }
  // The row of position `pos` (within token t's window) for `layer` and `head`.
  [[nodiscard]] WindowRow key(int64_t t, uint32_t layer, uint32_t head, int32_t pos) const {
    return row(false, t, layer, head, pos);
  }
  [[nodiscard]] WindowRow value(int64_t t, uint32_t layer, uint32_t head, int32_t pos) const {
    return row(true, t, layer, head, pos);
  }

  // The child of a fork goes on from its parent's rows (every layer).
  void copy_slot(uint32_t src, uint32_t dst);
  // The slot changes hands: none of its rows is the next owner's (the owner's first chunk
  // starts its rows).
  void reset_slot(uint32_t slot);

 private:
  RecentWindow(uint32_t slots, uint32_t tokens, uint32_t layers, uint32_t kv_heads, uint32_t dim,
               KvDtype rows, ZeroPages rings, std::unique_ptr<AttentionSink> sink);
  [[nodiscard]] WindowRow row(bool v, int64_t t, uint32_t layer, uint32_t head, int32_t pos) const;
  [[nodiscard]] uint64_t ring_index(uint32_t slot, uint32_t layer, uint32_t head,
                                    int32_t pos) const;

  uint32_t slots_, tokens_, cap_, layers_, kv_heads_, dim_;
  KvDtype dtype_;
  uint64_t row_bytes_;
  // K's rings, then V's, each [slots][layers][kv_heads][cap] rows of row_bytes_.
  ZeroPages rings_;
  std::unique_ptr<AttentionSink> sink_;
  [[nodiscard]] uint8_t* ring_k() const { return rings_.as<uint8_t>(); }
  [[nodiscard]] uint8_t* ring_v() const {
    return ring_k() + uint64_t{slots_} * layers_ * kv_heads_ * cap_ * row_bytes_;
  }
  // Per slot: the position after its last step, and the first position its rows hold for the
  // sequence now in it. A chunk that does not continue the slot's last step (a new sequence, or
  // one recomputed) starts it afresh, so no row of the slot's earlier owner is ever read: a
  // read below it is a bug (CHECK), never another sequence's KV.
  std::vector<int32_t> next_pos_, valid_from_;
  // The step: per token its slot, floor, position, and where its chunk starts (batch index and
  // position); the rows of the layer being run, [tokens][kv_heads] rows: in f16 (the sink's, and
  // the window's when its rows are f16) and in int8 when they are int8.
  int64_t num_tokens_ = 0;
  std::vector<int32_t> slot_, floor_, pos_, chunk_token_, chunk_pos_;
  std::vector<uint16_t> step_k_, step_v_;
  std::vector<uint8_t> step_k8_, step_v8_;
  [[nodiscard]] const uint8_t* step_row(bool v, uint64_t r) const {
    if (dtype_ == KvDtype::kInt8) return (v ? step_v8_ : step_k8_).data() + r * row_bytes_;
    return reinterpret_cast<const uint8_t*>((v ? step_v_ : step_k_).data() + r * dim_);
  }
};

}  // namespace kvs
