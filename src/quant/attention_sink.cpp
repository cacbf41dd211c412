#include "quant/attention_sink.h"

#include <algorithm>

#include "core/check.h"

namespace kvs {

Result<AttentionSink> AttentionSink::create(uint32_t slots, uint32_t layers, uint32_t kv_heads,
                                            uint32_t dim) {
  KVS_ASSIGN_OR_RETURN(ZeroPages rows, ZeroPages::map(bytes(slots, layers, kv_heads, dim),
                                                      "the attention sink's rows"));
  return AttentionSink(slots, layers, kv_heads, dim, std::move(rows));
}

uint64_t AttentionSink::bytes(uint32_t slots, uint32_t layers, uint32_t kv_heads, uint32_t dim) {
  return 2 * uint64_t{slots} * layers * kv_heads * dim * 2 * 2;
}

AttentionSink::AttentionSink(uint32_t slots, uint32_t layers, uint32_t kv_heads, uint32_t dim,
                             ZeroPages rows)
    : slots_(slots),
      layers_(layers),
      kv_heads_(kv_heads),
      dim_(dim),
      per_row_(uint64_t{layers} * kv_heads * dim),
      rows_(std::move(rows)),
      valid_(2 * size_t{slots}, 0) {}

uint16_t* AttentionSink::rows(uint32_t r, bool v) const {
  return rows_.as<uint16_t>() + (v ? 2 * uint64_t{slots_} * per_row_ : 0) + r * per_row_;
}

const uint16_t* AttentionSink::key(uint32_t slot, uint32_t layer, uint32_t head) const {
  KVS_CHECK(slot < slots_ && valid_[slot] != 0 && layer < layers_ && head < kv_heads_);
  return rows(slot, false) + (uint64_t{layer} * kv_heads_ + head) * dim_;
}

const uint16_t* AttentionSink::value(uint32_t slot, uint32_t layer, uint32_t head) const {
  KVS_CHECK(slot < slots_ && valid_[slot] != 0 && layer < layers_ && head < kv_heads_);
  return rows(slot, true) + (uint64_t{layer} * kv_heads_ + head) * dim_;
}

void AttentionSink::store(uint32_t slot, uint32_t layer, uint32_t head, const uint16_t* k,
                          const uint16_t* v) {
  KVS_CHECK(slot < slots_ && valid_[slot] != 0 && layer < layers_ && head < kv_heads_);
  const uint64_t at = (uint64_t{layer} * kv_heads_ + head) * dim_;
  std::copy_n(k, dim_, rows(slot, false) + at);
  std::copy_n(v, dim_, rows(slot, true) + at);
}

void AttentionSink::copy_rows(uint32_t from, uint32_t to) {
  if (from == to) return;
  std::copy_n(rows(from, false), per_row_, rows(to, false));
  std::copy_n(rows(from, true), per_row_, rows(to, true));
}

void AttentionSink::copy_slot(uint32_t src, uint32_t dst) {
  KVS_CHECK(src < slots_ && dst < slots_);
  copy_rows(src, dst);
  valid_[dst] = valid_[src];
}

void AttentionSink::adopt(uint32_t slot, uint32_t entry) {
  KVS_CHECK(slot < slots_ && entry < slots_ && valid_[slots_ + entry] != 0);
  copy_rows(slots_ + entry, slot);
  valid_[slot] = 1;
}

void AttentionSink::publish(uint32_t slot, uint32_t entry) {
  KVS_CHECK(slot < slots_ && entry < slots_ && valid_[slot] != 0);
  copy_rows(slot, slots_ + entry);
  valid_[slots_ + entry] = 1;
}

}  // namespace kvs
