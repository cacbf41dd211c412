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
    : layers_(layers),
      kv_heads_(kv_heads),
      dim_(dim),
      tokens_(tokens),
      slot_of_(num_chunks, -1),
      chunk_of_(slots, -1),
      stamp_(slots, 0),
      rows_(uint64_t{slots} * layers, kNoRows),
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
  KVS_CHECK(chunk < slot_of_.size() && layer < layers_ && head < kv_heads_);
  const int32_t slot = slot_of_[chunk];
  if (slot < 0 || rows_[uint64_t(slot) * layers_ + layer] != rows) return nullptr;
  return rows_of(static_cast<uint32_t>(slot), layer, head);
}

uint16_t* KeyTails::acquire(uint64_t chunk, uint32_t layer, uint32_t head) {
  KVS_CHECK(chunk < slot_of_.size() && layer < layers_ && head < kv_heads_);
  if (chunk_of_.empty()) return nullptr;
  return rows_of(slot_for(chunk), layer, head);
}

uint32_t KeyTails::slot_for(uint64_t chunk) {
  int32_t slot = slot_of_[chunk];
  if (slot < 0) {
    // A free slot, else the least recently written.
    uint32_t pick = 0;
    for (uint32_t s = 0; s < chunk_of_.size(); ++s) {
      if (chunk_of_[s] < 0) {
        pick = s;
        break;
      }
      if (stamp_[s] < stamp_[pick]) pick = s;
    }
    if (chunk_of_[pick] >= 0) release(pick);
    slot = static_cast<int32_t>(pick);
    slot_of_[chunk] = slot;
    chunk_of_[pick] = static_cast<int64_t>(chunk);
  }
  stamp_[slot] = ++clock_;
  return static_cast<uint32_t>(slot);
}

void KeyTails::copy(uint64_t src, uint64_t dst) {
  KVS_CHECK(src < slot_of_.size() && dst < slot_of_.size());
  if (src == dst) return;
  if (slot_of_[dst] >= 0) release(static_cast<uint32_t>(slot_of_[dst]));
  if (slot_of_[src] < 0 || chunk_of_.size() < 2) return;
  stamp_[slot_of_[src]] = ++clock_;  // so that taking a slot for dst does not evict src
  const uint32_t to = slot_for(dst);
  const uint32_t from = static_cast<uint32_t>(slot_of_[src]);
  const uint64_t per_slot = uint64_t{layers_} * kv_heads_ * tokens_ * dim_;
  uint16_t* d = data_.as<uint16_t>();
  std::copy_n(d + from * per_slot, per_slot, d + to * per_slot);
  std::copy_n(rows_.begin() + uint64_t{from} * layers_, layers_,
              rows_.begin() + uint64_t{to} * layers_);
}

void KeyTails::set_rows(uint64_t chunk, uint32_t layer, uint32_t rows) {
  KVS_CHECK(chunk < slot_of_.size() && layer < layers_ && rows <= tokens_);
  const int32_t slot = slot_of_[chunk];
  if (slot < 0) return;
  uint8_t* r = rows_.data() + uint64_t(slot) * layers_;
  r[layer] = rows == tokens_ ? kNoRows : static_cast<uint8_t>(rows);
  if (std::all_of(r, r + layers_, [](uint8_t v) { return v == kNoRows; }))
    release(static_cast<uint32_t>(slot));
}

void KeyTails::invalidate(uint64_t first, uint64_t end) {
  end = std::min<uint64_t>(end, slot_of_.size());
  for (uint64_t c = first; c < end; ++c)
    if (slot_of_[c] >= 0) release(static_cast<uint32_t>(slot_of_[c]));
}

void KeyTails::release(uint32_t slot) {
  const int64_t chunk = chunk_of_[slot];
  if (chunk >= 0) slot_of_[chunk] = -1;
  chunk_of_[slot] = -1;
  std::fill_n(rows_.begin() + uint64_t{slot} * layers_, layers_, kNoRows);
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
  uint64_t mapped = 0;
  for (uint64_t c = 0; c < slot_of_.size(); ++c) {
    if (slot_of_[c] < 0) continue;
    ++mapped;
    if (uint64_t(slot_of_[c]) >= chunk_of_.size() || chunk_of_[slot_of_[c]] != int64_t(c))
      return false;
  }
  return mapped == in_use();
}

}  // namespace kvs
