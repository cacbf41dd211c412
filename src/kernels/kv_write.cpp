#include "kernels/kv_write.h"

#include <algorithm>
#include <vector>

#include "core/check.h"
#include "kernels/kv_vector.h"
#include "quant/key_tails.h"
#include "quant/kv_channel_groups.h"
#include "quant/recent_window.h"

namespace kvs {
namespace {

// One group of a per-channel key format written by one write_kv call, for one kv head: tokens
// [t0, t1) go to rows [r0, n) of the G-token group `chunk`. A whole group written at once is
// sealed from the keys; otherwise the group's earlier rows come from its tail (or, without one,
// from its bytes), the new rows are added, and the group is sealed again over all of them.
struct ChannelSeal {
  uint64_t chunk;
  uint32_t head, r0, n;
  int64_t t0, t1;
  uint32_t range_from;  // 1: the group starts at position 0 and the sink leaves that row out
  uint16_t* tail;       // the group's tail (null: none); holds rows [0, r0) when from_tail
  bool from_tail;
  bool write_tail;  // the new rows go to the tail (not when the group is full: its tail is freed)
  int64_t kept_at;  // >= 0: rows [0, r0) were copied out of the tail, to this offset of the kept
};                  // rows (a group this write fills frees its tail before the seals run)

struct ChannelSealPlan {
  std::vector<ChannelSeal> seals;
  std::vector<uint16_t> kept;
  // A group in two runs of the write (its slots not together in the batch): its seals must run
  // in order, the later reading what the earlier wrote. The engine keeps a sequence's tokens
  // together, so this is for other callers.
  bool group_in_two_runs = false;
};

// The seals of the runs of consecutive slots in one group, in order, with every KeyTails lookup
// and update they make, in the order one thread sealing them would make it, made here on the
// calling thread: each seal can then run on any thread, and the tails' slots and row counts do not
// depend on which. A group the write fills frees its tail at once (so a group begun later in the
// write may take that slot), its earlier rows copied out first; it takes no tail if it had none.
ChannelSealPlan plan_channel_seals(const PagedKvLayout& kv, uint32_t layer, int64_t num_tokens,
                                   const int64_t* slot_mapping) {
  const uint32_t G = kv_channel_group_tokens(kv.k_dtype);
  const uint32_t D = kv.head_dim;
  KeyTails* tails = kv.key_tails;
  ChannelSealPlan plan;
  struct Run {
    uint64_t chunk;
    int64_t t0, t1;
  };
  std::vector<Run> runs;
  for (int64_t t0 = 0; t0 < num_tokens;) {
    const uint64_t slot = static_cast<uint64_t>(slot_mapping[t0]);
    int64_t t1 = t0 + 1;
    while (t1 < num_tokens && static_cast<uint64_t>(slot_mapping[t1]) == slot + (t1 - t0) &&
           static_cast<uint64_t>(slot_mapping[t1]) / G == slot / G)
      ++t1;
    runs.push_back({slot / G, t0, t1});
    t0 = t1;
  }
  std::vector<uint64_t> chunks(runs.size());
  for (size_t i = 0; i < runs.size(); ++i) chunks[i] = runs[i].chunk;
  std::sort(chunks.begin(), chunks.end());
  plan.group_in_two_runs = std::adjacent_find(chunks.begin(), chunks.end()) != chunks.end();
  for (const Run& run : runs) {
    const uint64_t chunk = run.chunk;
    const int64_t t0 = run.t0, t1 = run.t1;
    const auto r0 = static_cast<uint32_t>(static_cast<uint64_t>(slot_mapping[t0]) % G);
    const uint32_t n = r0 + static_cast<uint32_t>(t1 - t0);
    const uint32_t range_from = kv.recent != nullptr && kv.recent->sink_behind(t0, r0) ? 1 : 0;
    for (uint32_t h = 0; h < kv.kv_heads; ++h) {
      ChannelSeal s{.chunk = chunk,
                    .head = h,
                    .r0 = r0,
                    .n = n,
                    .t0 = t0,
                    .t1 = t1,
                    .range_from = range_from,
                    .tail = nullptr,
                    .from_tail = false,
                    .write_tail = false,
                    .kept_at = -1};
      if (tails != nullptr) {
        (void)tails->step_rows(chunk, h, true);  // created here: the seals only fill them
        if (!(r0 == 0 && n == G)) {
          s.tail = tails->find(chunk, layer, h, r0);
          s.from_tail = s.tail != nullptr;
          if (!s.from_tail && n < G) s.tail = tails->acquire(chunk, layer, h);
          s.write_tail = s.tail != nullptr && n < G;
          // Not for a group in two runs: its earlier run has not written the rows yet.
          if (s.from_tail && n == G && !plan.group_in_two_runs) {
            s.kept_at = static_cast<int64_t>(plan.kept.size());
            plan.kept.insert(plan.kept.end(), s.tail, s.tail + uint64_t{r0} * D);
          }
        }
      }
      plan.seals.push_back(s);
    }
    if (tails != nullptr) tails->set_rows(chunk, layer, n);
  }
  return plan;
}

void seal_channel_keys(const PagedKvLayout& kv, uint32_t layer, const ChannelSeal& s,
                       const uint16_t* kept, const float* k) {
  const uint32_t D = kv.head_dim;
  const ChannelBits bits = channel_bits(kv.k_dtype);
  const uint32_t G = kv_channel_group_tokens(kv.k_dtype);
  const uint64_t chunks_per_block = kv.block_size / G;
  const uint64_t group_bytes = channel_group_bytes(bits, G, D);
  const uint64_t row_stride = uint64_t{kv.kv_heads} * D;
  const uint32_t h = s.head, r0 = s.r0, n = s.n;
  uint8_t* group =
      kv.k_head(s.chunk / chunks_per_block, layer, h) + (s.chunk % chunks_per_block) * group_bytes;
  // This step's queries in the group read its rows in f16 (created by the plan).
  uint16_t* own = kv.key_tails != nullptr ? kv.key_tails->step_rows(s.chunk, h, false) : nullptr;
  const float* added = k + s.t0 * row_stride + h * D;  // the new rows, row_stride apart
  if (r0 == 0 && n == G) {
    quantize_channel_group(bits, added, row_stride, n, D, group, s.range_from, own);
    return;
  }
  // With its tail the group holds the seal of rows [0, r0) from these very f16 keys, so only
  // the channels whose range the new rows move are coded again (the same bytes as a whole
  // seal); rows decoded from the group's codes are other values and seal the group anew.
  if (s.from_tail) {
    const uint16_t* earlier = s.kept_at >= 0 ? kept + s.kept_at : s.tail;
    // The seal hands back the f16 keys of the new rows it rounded; the earlier ones are the
    // tail's, f16 keys already.
    if (own != nullptr) std::copy_n(earlier, uint64_t{r0} * D, own);
    reseal_channel_group(bits, earlier, added, row_stride, n, D, group, s.range_from, r0,
                         own != nullptr ? own + uint64_t{r0} * D : nullptr);
  } else {
    thread_local std::vector<float> rows;
    rows.resize(uint64_t{n} * D);
    for (uint32_t r = 0; r < r0; ++r) dequantize_channel_row(bits, group, r, D, &rows[r * D]);
    for (uint32_t r = r0; r < n; ++r) std::copy_n(added + (r - r0) * row_stride, D, &rows[r * D]);
    quantize_channel_group(bits, rows.data(), D, n, D, group, s.range_from, own);
  }
  const uint32_t sealed = s.from_tail ? r0 : 0;
  // Only the new rows go to the tail (a tail that was found holds the others).
  if (own != nullptr && s.write_tail)
    std::copy_n(own + uint64_t{sealed} * D, uint64_t{n - sealed} * D,
                s.tail + uint64_t{sealed} * D);
}

// Whether the seals may run at once: each touches its own group, step rows and tail. A group in
// two runs, or two seals that read or write one tail (a slot the plan handed on within the
// write), run in the plan's order instead.
bool seals_disjoint(const ChannelSealPlan& plan) {
  if (plan.group_in_two_runs) return false;
  std::vector<const uint16_t*> tails;
  for (const ChannelSeal& s : plan.seals)
    if ((s.from_tail && s.kept_at < 0) || s.write_tail) tails.push_back(s.tail);
  std::sort(tails.begin(), tails.end());
  return std::adjacent_find(tails.begin(), tails.end()) == tails.end();
}

}  // namespace

void write_kv(const PagedKvLayout& kv, uint32_t layer, int64_t num_tokens,
              const int64_t* slot_mapping, const float* k, const float* v, ThreadPool* pool) {
  const uint32_t D = kv.head_dim;
  const bool channel_keys = kv_dtype_per_channel(kv.k_dtype);
  auto slot_of = [&](size_t item) {
    return static_cast<uint64_t>(slot_mapping[item / kv.kv_heads]);
  };
  auto k_dst = [&](size_t item) {
    const uint64_t slot = slot_of(item);
    return kv.k_head(slot / kv.block_size, layer, static_cast<uint32_t>(item % kv.kv_heads)) +
           slot % kv.block_size * kv.k_vector_bytes;
  };
  auto v_dst = [&](size_t item) {
    const uint64_t slot = slot_of(item);
    return kv.v_head(slot / kv.block_size, layer, static_cast<uint32_t>(item % kv.kv_heads)) +
           slot % kv.block_size * kv.v_vector_bytes;
  };
  // One (token, kv head) per item: every item writes its own slot's vectors, so they can go to
  // the pool's threads in any split with the same bytes.
  auto write_vectors = [&](size_t begin, size_t end, int) {
    for (size_t item = begin; item < end; ++item) {
      if (!channel_keys) kv_vector_from_f32(kv.k_dtype, k + item * D, D, k_dst(item));
      kv_vector_from_f32(kv.v_dtype, v + item * D, D, v_dst(item));
    }
  };
  const auto items = static_cast<size_t>(num_tokens) * kv.kv_heads;
  const bool threads = pool != nullptr && pool->num_threads() > 1;
  ChannelSealPlan plan;
  if (channel_keys) {
    KVS_CHECK(kv.block_size % kv_channel_group_tokens(kv.k_dtype) == 0);
    if (kv.key_tails != nullptr) kv.key_tails->begin_step_rows();
    plan = plan_channel_seals(kv, layer, num_tokens, slot_mapping);
  }
  const std::vector<ChannelSeal>& seals = plan.seals;
  auto seal = [&](size_t begin, size_t end, int) {
    for (size_t i = begin; i < end; ++i)
      seal_channel_keys(kv, layer, seals[i], plan.kept.data(), k);
  };
  const bool disjoint = seals_disjoint(plan);
  if (threads && items < 2 * static_cast<size_t>(pool->num_threads())) {
    // Fewer vectors than two per thread (one sequence's decode step): every piece of work is its
    // own item of one region, claimed by whichever thread is free, so that no thread idles while
    // another finishes a second vector, then a second seal. The pieces: each key vector (keys per
    // token), each value vector's pieces (kv_vector_parts: int2_tcq64's groups), and each seal
    // (keys per channel) where they are disjoint. The seals touch only key groups, tails and
    // step rows, the vectors only their own slots.
    const uint32_t v_parts = kv_vector_parts(kv.v_dtype, D);
    // A vector of one piece is written whole, from the values as given.
    thread_local std::vector<float> prepared_buffer;  // the caller's: the workers read `prepared`
    if (v_parts > 1) {
      prepared_buffer.resize(items * D);
      for (size_t item = 0; item < items; ++item)
        kv_vector_prepare(kv.v_dtype, v + item * D, D, prepared_buffer.data() + item * D);
    }
    const float* const prepared = prepared_buffer.data();
    const size_t k_units = channel_keys ? 0 : items, v_units = items * v_parts;
    const size_t seal_units = disjoint ? seals.size() : 0;
    const size_t units = k_units + v_units + seal_units;
    auto unit = [&](size_t i) {
      if (i < k_units) return kv_vector_from_f32(kv.k_dtype, k + i * D, D, k_dst(i));
      i -= k_units;
      if (i < v_units) {
        if (v_parts == 1) return kv_vector_from_f32(kv.v_dtype, v + i * D, D, v_dst(i));
        const size_t item = i / v_parts;
        return kv_vector_part_from_prepared(kv.v_dtype, prepared + item * D, D,
                                            static_cast<uint32_t>(i % v_parts), v_dst(item));
      }
      seal(i - v_units, i - v_units + 1, 0);
    };
    if (units >= 2) {
      pool->parallel_for(units, 1, [&](size_t begin, size_t end, int) {
        for (size_t i = begin; i < end; ++i) unit(i);
      });
    } else {
      for (size_t i = 0; i < units; ++i) unit(i);
    }
    if (!disjoint) seal(0, seals.size(), 0);
    return;
  }
  if (threads && items >= 2) {
    const size_t parts = 2 * static_cast<size_t>(pool->num_threads());
    pool->parallel_for(items, (items + parts - 1) / parts, write_vectors);
  } else {
    write_vectors(0, items, 0);
  }
  if (threads && seals.size() >= 2 && disjoint) {
    pool->parallel_for(seals.size(), 1, seal);
  } else {
    seal(0, seals.size(), 0);
  }
}

}  // namespace kvs
