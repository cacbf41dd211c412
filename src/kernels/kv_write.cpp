#include "kernels/kv_write.h"

#include <algorithm>
#include <vector>

#include "core/check.h"
#include "core/half.h"
#include "kernels/kv_vector.h"
#include "quant/key_tails.h"
#include "quant/kv_channel_groups.h"
#include "quant/recent_window.h"

namespace kvs {
namespace {

// Keys of a per-channel format: tokens [t0, t1) go to rows [r0, r0 + t1 - t0) of one group of G
// tokens (chunk) for every head. A whole group written at once is sealed from the keys; otherwise
// the group's earlier rows come from its tail (or, without one, from its bytes), the new rows are
// added, and the group is sealed again over all of them.
void write_channel_keys(const PagedKvLayout& kv, uint32_t layer, uint64_t chunk, uint32_t r0,
                        const float* k, int64_t t0, int64_t t1) {
  const uint32_t D = kv.head_dim, bits = channel_group_bits(kv.k_dtype);
  const uint32_t n = r0 + static_cast<uint32_t>(t1 - t0);
  const uint32_t G = kv_channel_group_tokens(kv.k_dtype);
  const uint64_t chunks_per_block = kv.block_size / G;
  const uint64_t block = chunk / chunks_per_block;
  const uint64_t group_bytes = channel_group_bytes(bits, G, D);
  const uint64_t row_stride = uint64_t{kv.kv_heads} * D;
  thread_local std::vector<float> rows;
  rows.resize(uint64_t{G} * D);
  // With the attention sink, a group that starts at position 0 leaves that row out of its range.
  const uint32_t range_from = kv.recent != nullptr && kv.recent->sink_behind(t0, r0) ? 1 : 0;
  for (uint32_t h = 0; h < kv.kv_heads; ++h) {
    uint8_t* group = kv.k_head(block, layer, h) + (chunk % chunks_per_block) * group_bytes;
    KeyTails* tails = kv.key_tails;
    if (r0 == 0 && n == G) {
      quantize_channel_group(bits, k + t0 * row_stride + h * D, row_stride, n, D, group,
                             range_from);
      if (tails != nullptr) {  // this step's queries in the group read its rows in f16
        uint16_t* own = tails->step_rows(chunk, h, true);
        for (uint32_t r = 0; r < n; ++r)
          for (uint32_t i = 0; i < D; ++i)
            own[r * D + i] = channel_key_f16(k[(t0 + r) * row_stride + h * D + i]);
      }
      continue;
    }
    uint16_t* tail = tails != nullptr ? tails->find(chunk, layer, h, r0) : nullptr;
    // With its tail the group holds the seal of rows [0, r0) from these very f16 keys, so only
    // the channels whose range the new rows move are coded again (the same bytes as a whole
    // seal); rows decoded from the group's codes are other values and seal the group anew.
    const bool from_tail = tail != nullptr;
    if (from_tail) {
      for (uint64_t i = 0; i < uint64_t{r0} * D; ++i) rows[i] = f16_to_f32(tail[i]);
    } else {
      for (uint32_t r = 0; r < r0; ++r) dequantize_channel_row(bits, group, r, D, &rows[r * D]);
      if (tails != nullptr) tail = tails->acquire(chunk, layer, h);
    }
    for (int64_t t = t0; t < t1; ++t)
      std::copy_n(k + t * row_stride + h * D, D, &rows[(r0 + (t - t0)) * D]);
    reseal_channel_group(bits, rows.data(), D, n, D, group, range_from, from_tail ? r0 : 0);
    if (tails != nullptr) {
      uint16_t* own = tails->step_rows(chunk, h, true);
      // A tail's rows are f16 keys already (channel_key_f16 gives them back bit for bit): only
      // the new rows are rounded, and only they are added to the tail.
      const uint64_t kept = from_tail ? uint64_t{r0} * D : 0;
      if (from_tail) std::copy_n(tail, kept, own);
      for (uint64_t i = kept; i < uint64_t{n} * D; ++i) own[i] = channel_key_f16(rows[i]);
      if (tail != nullptr) std::copy_n(own + kept, uint64_t{n} * D - kept, tail + kept);
    }
  }
  if (kv.key_tails != nullptr) kv.key_tails->set_rows(chunk, layer, n);
}

}  // namespace

void write_kv(const PagedKvLayout& kv, uint32_t layer, int64_t num_tokens,
              const int64_t* slot_mapping, const float* k, const float* v, ThreadPool* pool) {
  const uint32_t D = kv.head_dim;
  const bool channel_keys = kv_dtype_per_channel(kv.k_dtype);
  // One (token, kv head) per item: every item writes its own slot's vectors, so they can go to
  // the pool's threads in any split with the same bytes.
  auto write_vectors = [&](size_t begin, size_t end, int) {
    for (size_t item = begin; item < end; ++item) {
      const auto t = static_cast<int64_t>(item / kv.kv_heads);
      const auto h = static_cast<uint32_t>(item % kv.kv_heads);
      const uint64_t slot = static_cast<uint64_t>(slot_mapping[t]);
      const uint64_t block = slot / kv.block_size;
      const uint64_t off = slot % kv.block_size;
      const float* ks = k + (t * kv.kv_heads + h) * D;
      const float* vs = v + (t * kv.kv_heads + h) * D;
      if (!channel_keys)
        kv_vector_from_f32(kv.k_dtype, ks, D, kv.k_head(block, layer, h) + off * kv.k_vector_bytes);
      kv_vector_from_f32(kv.v_dtype, vs, D, kv.v_head(block, layer, h) + off * kv.v_vector_bytes);
    }
  };
  const auto items = static_cast<size_t>(num_tokens) * kv.kv_heads;
  if (pool != nullptr && pool->num_threads() > 1 && items >= 2) {
    const size_t parts = 2 * static_cast<size_t>(pool->num_threads());
    pool->parallel_for(items, (items + parts - 1) / parts, write_vectors);
  } else {
    write_vectors(0, items, 0);
  }
  if (!channel_keys) return;
  const uint32_t G = kv_channel_group_tokens(kv.k_dtype);
  KVS_CHECK(kv.block_size % G == 0);
  if (kv.key_tails != nullptr) kv.key_tails->begin_step_rows();
  // Runs of consecutive slots in one group.
  for (int64_t t0 = 0; t0 < num_tokens;) {
    const uint64_t slot = static_cast<uint64_t>(slot_mapping[t0]);
    const uint64_t chunk = slot / G;
    int64_t t1 = t0 + 1;
    while (t1 < num_tokens && static_cast<uint64_t>(slot_mapping[t1]) == slot + (t1 - t0) &&
           static_cast<uint64_t>(slot_mapping[t1]) / G == chunk)
      ++t1;
    write_channel_keys(kv, layer, chunk, static_cast<uint32_t>(slot % G), k, t0, t1);
    t0 = t1;
  }
}

}  // namespace kvs
