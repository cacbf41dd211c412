#include "quant/attention_sink.h"

#include <algorithm>
#include <numeric>
#include <set>

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
      valid_(slots, 0),
      token_(slots, -1),
      used_(slots, 0) {}

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

int32_t AttentionSink::entry_of(int32_t token) const {
  if (token < 0) return -1;  // -1 marks an empty entry
  for (uint32_t e = 0; e < slots_; ++e)
    if (token_[e] == token) return static_cast<int32_t>(e);
  return -1;
}

bool AttentionSink::adopt(uint32_t slot, int32_t token) {
  KVS_CHECK(slot < slots_ && token >= 0);
  const int32_t e = entry_of(token);
  if (e < 0) return false;
  copy_rows(slots_ + uint32_t(e), slot);
  valid_[slot] = 1;
  used_[e] = ++clock_;
  return true;
}

void AttentionSink::publish(uint32_t slot, int32_t token) {
  KVS_CHECK(slot < slots_ && valid_[slot] != 0 && token >= 0);
  int32_t e = entry_of(token);
  if (e < 0)  // an empty entry (use 0), else the least recently used one
    e = static_cast<int32_t>(std::min_element(used_.begin(), used_.end()) - used_.begin());
  token_[e] = token;
  copy_rows(slot, slots_ + uint32_t(e));
  used_[e] = ++clock_;
}

std::vector<int32_t> AttentionSink::tokens_by_use() const {
  std::vector<uint32_t> order(slots_);
  std::iota(order.begin(), order.end(), 0u);
  std::sort(order.begin(), order.end(),
            [&](uint32_t a, uint32_t b) { return used_[a] < used_[b]; });
  std::vector<int32_t> out;
  for (const uint32_t e : order)
    if (token_[e] >= 0) out.push_back(token_[e]);
  return out;
}

bool AttentionSink::check_integrity() const {
  std::set<int32_t> tokens;
  std::set<uint64_t> stamps;
  for (uint32_t e = 0; e < slots_; ++e) {
    if (token_[e] < 0) {
      if (used_[e] != 0) return false;
      continue;
    }
    if (!tokens.insert(token_[e]).second || used_[e] == 0 || used_[e] > clock_ ||
        !stamps.insert(used_[e]).second)
      return false;
  }
  return true;
}

}  // namespace kvs
