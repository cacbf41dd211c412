#include "quant/key_tails.h"

#include <algorithm>

#include "core/check.h"
#include "quant/kv_channel_groups.h"

namespace kvs {

Result<KeyTails> KeyTails::create(uint32_t slots, uint32_t layers, uint32_t kv_heads, uint32_t dim,
                                  uint32_t tokens, uint64_t num_chunks) {
  KVS_CHECK(tokens >= 1 && tokens <= kMaxChannelGroupTokens);
  KVS_ASSIGN_OR_RETURN(
      ZeroPages data, ZeroPages::map(bytes(slots, layers, kv_heads, dim, tokens), "the key tails"));
  return KeyTails(slots, layers, kv_heads, dim, tokens, num_chunks, std::move(data));
}

KeyTails::KeyTails(uint32_t slots, uint32_t layers, uint32_t kv_heads, uint32_t dim,
                   uint32_t tokens, uint64_t num_chunks, ZeroPages data)
    : slots_(slots),
      layers_(layers),
      kv_heads_(kv_heads),
      dim_(dim),
      tokens_(tokens),
      slot_of_(num_chunks * layers, -1),
      chunk_of_(uint64_t{layers} * slots, -1),
      stamp_(uint64_t{layers} * slots, 0),
      rows_(uint64_t{layers} * slots, kNoRows),
      data_(std::move(data)) {}

uint64_t KeyTails::bytes(uint32_t slots, uint32_t layers, uint32_t kv_heads, uint32_t dim,
                         uint32_t tokens) {
  return uint64_t{slots} * layers * kv_heads * tokens * dim * 2;
}

uint16_t* KeyTails::rows_of(uint32_t slot, uint32_t layer, uint32_t head) {
  return data_.as<uint16_t>() +
         ((uint64_t{slot} * layers_ + layer) * kv_heads_ + head) * tokens_ * dim_;
}

uint16_t* KeyTails::find(uint64_t chunk, uint32_t layer, uint32_t head, uint32_t rows) {
  KVS_CHECK(of(chunk, layer) < slot_of_.size() && layer < layers_ && head < kv_heads_);
  const int32_t slot = slot_of_[of(chunk, layer)];
  if (slot < 0 || rows_[at(layer, static_cast<uint32_t>(slot))] != rows) return nullptr;
  stamp_[at(layer, static_cast<uint32_t>(slot))] = ++clock_;
  return rows_of(static_cast<uint32_t>(slot), layer, head);
}

uint16_t* KeyTails::acquire(uint64_t chunk, uint32_t layer, uint32_t head) {
  KVS_CHECK(of(chunk, layer) < slot_of_.size() && layer < layers_ && head < kv_heads_);
  if (slots_ == 0) return nullptr;
  return rows_of(slot_for(chunk, layer), layer, head);
}

uint32_t KeyTails::slot_for(uint64_t chunk, uint32_t layer) {
  int32_t slot = slot_of_[of(chunk, layer)];
  if (slot < 0) {
    // A free slot of the layer, else its least recently written.
    uint32_t pick = 0;
    for (uint32_t s = 0; s < slots_; ++s) {
      if (chunk_of_[at(layer, s)] < 0) {
        pick = s;
        break;
      }
      if (stamp_[at(layer, s)] < stamp_[at(layer, pick)]) pick = s;
    }
    if (chunk_of_[at(layer, pick)] >= 0) release(layer, pick);
    slot = static_cast<int32_t>(pick);
    slot_of_[of(chunk, layer)] = slot;
    chunk_of_[at(layer, pick)] = static_cast<int64_t>(chunk);
  }
  stamp_[at(layer, static_cast<uint32_t>(slot))] = ++clock_;
  return static_cast<uint32_t>(slot);
}

void KeyTails::copy(uint64_t src, uint64_t dst) {
  KVS_CHECK(of(src, 0) < slot_of_.size() && of(dst, 0) < slot_of_.size());
  if (src == dst) return;
  const uint64_t per_layer = uint64_t{kv_heads_} * tokens_ * dim_;
  for (uint32_t l = 0; l < layers_; ++l) {
    if (slot_of_[of(dst, l)] >= 0) release(l, static_cast<uint32_t>(slot_of_[of(dst, l)]));
    const int32_t from = slot_of_[of(src, l)];
    if (from < 0 || slots_ < 2) continue;
    stamp_[at(l, static_cast<uint32_t>(from))] = ++clock_;  // so that dst's slot is not src's
    const uint32_t to = slot_for(dst, l);
    std::copy_n(rows_of(static_cast<uint32_t>(from), l, 0), per_layer, rows_of(to, l, 0));
    rows_[at(l, to)] = rows_[at(l, static_cast<uint32_t>(from))];
  }
}

void KeyTails::set_rows(uint64_t chunk, uint32_t layer, uint32_t rows) {
  KVS_CHECK(of(chunk, layer) < slot_of_.size() && layer < layers_ && rows <= tokens_);
  const int32_t slot = slot_of_[of(chunk, layer)];
  if (slot < 0) return;
  if (rows == tokens_)
    release(layer, static_cast<uint32_t>(slot));
  else
    rows_[at(layer, static_cast<uint32_t>(slot))] = static_cast<uint8_t>(rows);
}

void KeyTails::invalidate(uint64_t first, uint64_t end) {
  end = std::min<uint64_t>(end, slot_of_.size() / std::max(1u, layers_));
  for (uint64_t c = first; c < end; ++c)
    for (uint32_t l = 0; l < layers_; ++l)
      if (slot_of_[of(c, l)] >= 0) release(l, static_cast<uint32_t>(slot_of_[of(c, l)]));
}

void KeyTails::release(uint32_t layer, uint32_t slot) {
  const int64_t chunk = chunk_of_[at(layer, slot)];
  if (chunk >= 0) slot_of_[of(static_cast<uint64_t>(chunk), layer)] = -1;
  chunk_of_[at(layer, slot)] = -1;
  rows_[at(layer, slot)] = kNoRows;
}

void KeyTails::begin_step_rows() { step_index_.clear(); }

uint16_t* KeyTails::step_rows(uint64_t chunk, uint32_t head, bool create) {
  KVS_CHECK(head < kv_heads_);
  const uint64_t per_chunk = uint64_t{kv_heads_} * tokens_ * dim_;
  auto it = step_index_.find(chunk);
  if (it == step_index_.end()) {
    if (!create) return nullptr;
    const uint32_t index = static_cast<uint32_t>(step_index_.size());
    if (step_data_.size() < (index + 1) * per_chunk) step_data_.resize((index + 1) * per_chunk);
    it = step_index_.emplace(chunk, index).first;
  }
  return step_data_.data() + it->second * per_chunk + uint64_t{head} * tokens_ * dim_;
}

const uint16_t* KeyTails::step_rows(uint64_t chunk, uint32_t head) const {
  const auto it = step_index_.find(chunk);
  if (it == step_index_.end()) return nullptr;
  return step_data_.data() + (uint64_t{it->second} * kv_heads_ + head) * tokens_ * dim_;
}

const uint16_t* KeyTails::step_key(uint64_t block, uint32_t offset, uint32_t block_size,
                                   uint32_t head) const {
  const uint64_t slot = block * block_size + offset;
  const uint16_t* rows = step_rows(slot / tokens_, head);
  return rows != nullptr ? rows + slot % tokens_ * dim_ : nullptr;
}

uint32_t KeyTails::in_use() const {
  return static_cast<uint32_t>(
      std::count_if(chunk_of_.begin(), chunk_of_.end(), [](int64_t c) { return c >= 0; }));
}

bool KeyTails::check_integrity() const {
  // A free slot holds no rows; a taken one none yet or a partial group.
  for (uint64_t i = 0; i < chunk_of_.size(); ++i)
    if (chunk_of_[i] < 0 ? rows_[i] != kNoRows : rows_[i] != kNoRows && rows_[i] >= tokens_)
      return false;
  uint64_t mapped = 0;
  for (uint64_t i = 0; i < slot_of_.size(); ++i) {
    if (slot_of_[i] < 0) continue;
    ++mapped;
    const auto layer = static_cast<uint32_t>(i % layers_);
    if (uint32_t(slot_of_[i]) >= slots_ ||
        chunk_of_[at(layer, static_cast<uint32_t>(slot_of_[i]))] != int64_t(i / layers_))
      return false;
  }
  return mapped == in_use();
}

}  // namespace kvs
