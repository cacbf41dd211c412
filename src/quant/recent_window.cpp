#include "quant/recent_window.h"

#include <algorithm>
#include <limits>

#include "core/check.h"
#include "core/half.h"
#include "quant/f16_rows.h"
#include "quant/kv_codecs.h"

namespace kvs {

void window_row_to_f32(const WindowRow& row, uint32_t dim, float* out) {
  if (row.dtype == KvDtype::kInt8) {
    dequantize_int8(row.bytes, dim, out);
    return;
  }
  KVS_CHECK(row.dtype == KvDtype::kF16);
  f32_from_f16_rows(reinterpret_cast<const uint16_t*>(row.bytes), dim, out);
}

Status check_recent_window_dtype(KvDtype dtype) {
  if (dtype == KvDtype::kF16 || dtype == KvDtype::kInt8) return Status::ok();
  return invalid_argument(std::string("--kv-recent-window-dtype must be f16 or int8, got ") +
                          kv_dtype_name(dtype));
}

Result<KvDtype> parse_recent_window_dtype(std::string_view name) {
  auto d = parse_kv_dtype(name);
  if (!d.is_ok())
    return invalid_argument("--kv-recent-window-dtype must be f16 or int8, got '" +
                            std::string(name) + "'");
  KVS_RETURN_IF_ERROR(check_recent_window_dtype(*d));
  return *d;
}

Result<RecentWindow> RecentWindow::create(uint32_t slots, uint32_t tokens, uint32_t layers,
                                          uint32_t kv_heads, uint32_t dim, bool sink,
                                          KvDtype rows) {
  KVS_CHECK(tokens % kRecentWindowAlign == 0 && tokens <= kMaxRecentWindow);
  KVS_RETURN_IF_ERROR(check_recent_window_dtype(rows));
  KVS_ASSIGN_OR_RETURN(ZeroPages rings,
                       ZeroPages::map(bytes(slots, tokens, layers, kv_heads, dim, false, rows),
                                      "the recent-token window"));
  std::unique_ptr<AttentionSink> s;
  if (sink) {
    KVS_ASSIGN_OR_RETURN(AttentionSink a, AttentionSink::create(slots, layers, kv_heads, dim));
    s = std::make_unique<AttentionSink>(std::move(a));
  }
  return RecentWindow(slots, tokens, layers, kv_heads, dim, rows, std::move(rings), std::move(s));
}

RecentWindow::RecentWindow(uint32_t slots, uint32_t tokens, uint32_t layers, uint32_t kv_heads,
                           uint32_t dim, KvDtype rows, ZeroPages rings,
                           std::unique_ptr<AttentionSink> sink)
    : slots_(slots),
      tokens_(tokens),
      cap_(tokens + kRecentWindowAlign),
      layers_(layers),
      kv_heads_(kv_heads),
      dim_(dim),
      dtype_(rows),
      row_bytes_(kv_vector_bytes(rows, dim)),
      rings_(std::move(rings)),
      sink_(std::move(sink)),
      next_pos_(slots, -1),
      valid_from_(slots, 0) {}

uint64_t RecentWindow::bytes(uint32_t slots, uint32_t tokens, uint32_t layers, uint32_t kv_heads,
                             uint32_t dim, bool sink, KvDtype rows) {
  return uint64_t{slots} * layers * kv_heads * (tokens + kRecentWindowAlign) *
             kv_vector_bytes(rows, dim) * 2 +
         (sink ? AttentionSink::bytes(slots, layers, kv_heads, dim) : 0);
}

uint32_t RecentWindow::floor_of(uint32_t boundary, uint32_t tokens) {
  return boundary > tokens ? (boundary - tokens) / kRecentWindowAlign * kRecentWindowAlign : 0;
}

void RecentWindow::begin_step(int64_t num_tokens, const int32_t* positions, const int32_t* slots,
                              const int32_t* floors) {
  num_tokens_ = num_tokens;
  slot_.assign(slots, slots + num_tokens);
  floor_.assign(floors, floors + num_tokens);
  pos_.assign(positions, positions + num_tokens);
  chunk_token_.resize(num_tokens);
  chunk_pos_.resize(num_tokens);
  for (int64_t t = 0; t < num_tokens; ++t) {
    KVS_CHECK(slots[t] < int32_t(slots_));
    const bool starts =
        t == 0 || slots[t] < 0 || slots[t] != slots[t - 1] || positions[t] != positions[t - 1] + 1;
    chunk_token_[t] = starts ? int32_t(t) : chunk_token_[t - 1];
    chunk_pos_[t] = starts ? positions[t] : chunk_pos_[t - 1];
    if (slots[t] < 0) continue;
    if (starts && positions[t] != next_pos_[slots[t]]) valid_from_[slots[t]] = positions[t];
    if (sink_ != nullptr && positions[t] == 0) sink_->begin_rows(uint32_t(slots[t]));
    next_pos_[slots[t]] = positions[t] + 1;
  }
  const uint64_t rows = uint64_t(num_tokens) * kv_heads_ * dim_;
  step_k_.resize(rows);
  step_v_.resize(rows);
  if (dtype_ == KvDtype::kInt8) {
    step_k8_.resize(uint64_t(num_tokens) * kv_heads_ * row_bytes_);
    step_v8_.resize(step_k8_.size());
  }
}

void RecentWindow::store(const float* k, const float* v) {
  f16_from_f32_rows(k, step_k_.size(), step_k_.data());
  f16_from_f32_rows(v, step_v_.size(), step_v_.data());
  if (dtype_ != KvDtype::kInt8) return;
  // int8 rows of the f32 vectors (the codec rounds them once, as the pool's int8 does).
  for (uint64_t r = 0; r < uint64_t(num_tokens_) * kv_heads_; ++r) {
    quantize_int8(k + r * dim_, dim_, step_k8_.data() + r * row_bytes_);
    quantize_int8(v + r * dim_, dim_, step_v8_.data() + r * row_bytes_);
  }
}

uint64_t RecentWindow::ring_index(uint32_t slot, uint32_t layer, uint32_t head, int32_t pos) const {
  return (((uint64_t{slot} * layers_ + layer) * kv_heads_ + head) * cap_ + uint32_t(pos) % cap_) *
         row_bytes_;
}

void RecentWindow::commit(uint32_t layer) {
  KVS_CHECK(layer < layers_);
  // In batch order, so a chunk longer than the ring leaves its last cap_ rows.
  for (int64_t t = 0; t < num_tokens_; ++t) {
    if (slot_[t] < 0) continue;
    for (uint32_t h = 0; h < kv_heads_; ++h) {
      const uint64_t r = uint64_t(t) * kv_heads_ + h;
      const uint64_t to = ring_index(uint32_t(slot_[t]), layer, h, pos_[t]);
      std::copy_n(step_row(false, r), row_bytes_, ring_k() + to);
      std::copy_n(step_row(true, r), row_bytes_, ring_v() + to);
      if (sink_ != nullptr && pos_[t] == 0)
        sink_->store(uint32_t(slot_[t]), layer, h, step_k_.data() + r * dim_,
                     step_v_.data() + r * dim_);
    }
  }
}

int32_t RecentWindow::first_position(int64_t t, int32_t context_len) const {
  if (tokens_ == 0 || slot_[t] < 0) return context_len;
  const int32_t q = context_len - 1;
  if (q < floor_[t]) return context_len;
  const int32_t group = q / int32_t(kRecentWindowAlign) * int32_t(kRecentWindowAlign);
  return std::max(floor_[t], group - int32_t(tokens_));
}

WindowRow RecentWindow::row(bool v, int64_t t, uint32_t layer, uint32_t head, int32_t pos) const {
  const int32_t p0 = chunk_pos_[t];
  if (pos >= p0) {
    const uint64_t r = (uint64_t(chunk_token_[t]) + (pos - p0)) * kv_heads_ + head;
    // Position 0 with a sink: its f16 rows, as every later chunk reads them from the sink.
    if (pos == 0 && sink_ != nullptr && slot_[t] >= 0)
      return {reinterpret_cast<const uint8_t*>((v ? step_v_ : step_k_).data() + r * dim_),
              KvDtype::kF16};
    return {step_row(v, r), dtype_};
  }
  // Position 0 before the chunk: the sink's rows (they are valid: the sequence computed or
  // adopted them), f16.
  if (pos == 0 && sink_ != nullptr && slot_[t] >= 0 && sink_->valid(uint32_t(slot_[t])))
    return {reinterpret_cast<const uint8_t*>(v ? sink_->value(uint32_t(slot_[t]), layer, head)
                                               : sink_->key(uint32_t(slot_[t]), layer, head)),
            KvDtype::kF16};
  // Rows before the chunk come from the ring, which holds the cap_ positions before it.
  KVS_CHECK(pos >= p0 - int32_t(cap_) && pos >= floor_[t] && pos >= valid_from_[slot_[t]]);
  return {(v ? ring_v() : ring_k()) + ring_index(uint32_t(slot_[t]), layer, head, pos), dtype_};
}

void RecentWindow::reset_slot(uint32_t slot) {
  KVS_CHECK(slot < slots_);
  next_pos_[slot] = -1;
  valid_from_[slot] = std::numeric_limits<int32_t>::max();
  if (sink_ != nullptr) sink_->reset_slot(slot);
}

void RecentWindow::copy_slot(uint32_t src, uint32_t dst) {
  KVS_CHECK(src < slots_ && dst < slots_);
  if (src == dst) return;
  const uint64_t per_slot = uint64_t{layers_} * kv_heads_ * cap_ * row_bytes_;
  std::copy_n(ring_k() + src * per_slot, per_slot, ring_k() + dst * per_slot);
  std::copy_n(ring_v() + src * per_slot, per_slot, ring_v() + dst * per_slot);
  next_pos_[dst] = next_pos_[src];
  valid_from_[dst] = valid_from_[src];
  if (sink_ != nullptr) sink_->copy_slot(src, dst);
}

}  // namespace kvs
