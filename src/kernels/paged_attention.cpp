#include "kernels/paged_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/check.h"
#include "core/half.h"
#include "kernels/attention_segments.h"
#include "kernels/int8_key_dots.h"
#include "kernels/kv_vector.h"
#include "kernels/trellis_values.h"
#include "quant/key_tails.h"
#include "quant/kv_channel_groups.h"
#include "quant/kv_codecs.h"
#include "quant/recent_window.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/paged_attention.cpp"
#include <hwy/aligned_allocator.h>
#include <hwy/cache_control.h>
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

// After highway.h (per-target re-inclusion), hence its own include block.
#include <hwy/contrib/math/math-inl.h>

#include "kernels/hadamard_rotation-inl.h"
#include "kernels/kv_readers-inl.h"
// After the readers: the score pass and the per-range arguments (RangeArgs, Partial), its form
// over key tiles, the softmax steps (with the merge of a token's segments) and the value pass.
#include "kernels/attention_key_scores-inl.h"
#include "kernels/attention_key_tiles-inl.h"
#include "kernels/attention_softmax-inl.h"
#include "kernels/attention_values-inl.h"

// After the score pass (RangeArgs): its form over per-channel keys.
#include "kernels/attention_channel_keys-inl.h"

// The recent-token window's rows (after the softmax steps).
#include "kernels/attention_recent_window-inl.h"

HWY_BEFORE_NAMESPACE();
namespace kvs {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// DF, VF and the format readers (Read*) come from kernels/kv_readers-inl.h; RangeArgs, Partial,
// BlockPrefetch and the score pass (ScoreKeysD) from kernels/attention_key_scores-inl.h; the value
// pass (AccumulateValues) from kernels/attention_values-inl.h.

// Fallback for head dims the readers cannot tile (D % Lanes != 0, or a grouped format on a
// target with more than 16 f32 lanes): scalar decode of each vector, plain loops.
template <int NG>
static void ScoreKeysScalar(const RangeArgs& r, float* buf) {
  const PagedAttentionArgs& a = *r.a;
  const PagedKvLayout& kv = a.kv;
  const uint32_t D = kv.head_dim, bs = kv.block_size;
  const int32_t len = r.j1 - r.j0;
  // Not rotated: the fallback decodes K to the original space (int8 keys, int8_had's too, are
  // scored from r.q8 instead, in the stored space).
  const float* q = r.q;
  for (int32_t j = r.j0; j < r.j1; ++j) {
    const uint32_t block = a.block_table[r.t][j / bs];
    const uint8_t* k = kv.k_head(block, a.layer, r.kvh) + (j % bs) * kv.k_vector_bytes;
    // int8 keys against int8 queries (for int8_had both rotated): the exact integer scores of
    // every other path.
    if (r.q8 != nullptr) {
      const float ks = load_f16_scale(k + D) * a.scale;
      for (int g = 0; g < NG; ++g) {
        int32_t sum = 0;
        for (uint32_t i = 0; i < D; ++i)
          sum += int32_t{r.q8[g * D + i]} * static_cast<int8_t>(k[i]);
        r.scores[g * len + (j - r.j0)] = static_cast<float>(sum) * r.dq[g] * ks;
      }
      continue;
    }
    kv_key_to_f32(kv, block, a.layer, r.kvh, j % bs, buf);
    for (int g = 0; g < NG; ++g) {
      float d = 0;
      for (uint32_t i = 0; i < D; ++i) d += q[g * D + i] * buf[i];
      r.scores[g * len + (j - r.j0)] = d * a.scale;
    }
  }
}
template <int NG>
static void AccumulateValuesScalar(const RangeArgs& r, float* out, float* buf) {
  const PagedAttentionArgs& a = *r.a;
  const PagedKvLayout& kv = a.kv;
  const uint32_t D = kv.head_dim, bs = kv.block_size;
  const int32_t len = r.j1 - r.j0;
  for (int32_t j = r.j0; j < r.j1; ++j) {
    kv_vector_to_f32(
        kv.v_dtype,
        kv.v_head(a.block_table[r.t][j / bs], a.layer, r.kvh) + (j % bs) * kv.v_vector_bytes, D,
        buf, 0);
    for (int g = 0; g < NG; ++g)
      for (uint32_t i = 0; i < D; ++i) out[g * D + i] += r.scores[g * len + (j - r.j0)] * buf[i];
  }
}

// The int8 format's scores from the VNNI kernels (kernels/int8_key_dots.h), a block at a time,
// then the same factors in the same order as ScoreKeys<ScoreInt8>: (sum x dq) x (d_k x scale).
template <int NG>
static void ScoreKeysVnni(const RangeArgs& r, const int8_key_dots::Kernels& kd) {
  const PagedAttentionArgs& a = *r.a;
  const PagedKvLayout& kv = a.kv;
  const uint32_t D = kv.head_dim;
  const int32_t bs = static_cast<int32_t>(kv.block_size);
  const int32_t len = r.j1 - r.j0;
  const uint32_t* table = a.block_table[r.t];
  const uint64_t kvb = kv.k_vector_bytes;
  float* const ks = r.key_scales;
  for (int32_t j = r.j0; j < r.j1;) {
    const int32_t b = j / bs;
    const int32_t end = std::min<int32_t>(r.j1, (b + 1) * bs);
    const uint8_t* kb = kv.k_head(table[b], a.layer, r.kvh);
    const PrefetchCursor plan = BlockPrefetch(r, j, b);
    const int8_key_dots::Prefetch pf{.p = {plan.p0, plan.p1}, .bytes = {plan.bytes0, plan.bytes1}};
    const uint8_t* k0 = kb + int64_t{j - b * bs} * kvb;
    kd.dots(r.q8, r.qsum, NG, D, k0, kvb, end - j, r.scores + (j - r.j0), len, pf);
    for (int32_t i = 0; i < end - j; ++i)
      ks[j - r.j0 + i] = ScoreInt8::Scale(k0 + i * kvb, D) * a.scale;
    j = end;
  }
  const DF df;
  const size_t L = hn::Lanes(df);
  for (int g = 0; g < NG; ++g) {
    float* row = r.scores + g * len;
    const float dq = r.dq[g];
    const VF vdq = hn::Set(df, dq);
    int32_t i = 0;
    for (; i + static_cast<int32_t>(L) <= len; i += L)
      hn::StoreU(hn::Mul(hn::Mul(hn::LoadU(df, row + i), vdq), hn::LoadU(df, ks + i)), df, row + i);
    for (; i < len; ++i) row[i] = row[i] * dq * ks[i];
  }
}

template <int NG>
static void ScoreKeysFor(KvDtype dtype, const RangeArgs& r, float* buf) {
  if (kv_dtype_per_channel(dtype)) return ScoreKeysChannel<NG>(r, buf);
  if (!readers_fit(dtype, r.a->kv.head_dim)) return ScoreKeysScalar<NG>(r, buf);
  switch (dtype) {
    case KvDtype::kF32: return ScoreKeysD<ReadF32, NG>(r);
    case KvDtype::kF16: return ScoreKeysD<ReadF16, NG>(r);
    case KvDtype::kBF16: return ScoreKeysD<ReadBF16, NG>(r);
    case KvDtype::kFp8E4M3: return ScoreKeysD<ReadFp8E4M3, NG>(r);
    case KvDtype::kFp8E5M2: return ScoreKeysD<ReadFp8E5M2, NG>(r);
    case KvDtype::kFp8E4M3Dyn: return ScoreKeysD<ReadFp8E4M3Dyn, NG>(r);
    case KvDtype::kInt8:  // int8 queries (kernels/int8_key_dots.h)
    case KvDtype::kInt8Had:
      if (r.int8_dots != nullptr) return ScoreKeysVnni<NG>(r, *r.int8_dots);
      if (int8_scores_fit(r.a->kv.head_dim)) return ScoreKeysD<ScoreInt8, NG>(r);
      return ScoreKeysScalar<NG>(r, buf);
    case KvDtype::kInt4:
    case KvDtype::kQ4_0:
    case KvDtype::kInt4Had: return ScoreKeysD<ReadQ4, NG>(r);
    case KvDtype::kInt3Had: return ScoreKeysD<ReadLowBit<3>, NG>(r);
    case KvDtype::kInt2Had: return ScoreKeysD<ReadLowBit<2>, NG>(r);
    case KvDtype::kInt2Had64: return ScoreKeysD<ReadLowBit<2, kLowBitGroup64>, NG>(r);
    case KvDtype::kInt2Tcq64: return ScoreKeysD<ReadTrellis, NG>(r);
    case KvDtype::kQ8_0:
    case KvDtype::kQ8_0Had: return ScoreKeysD<ReadQ8, NG>(r);
    case KvDtype::kInt4Chan:
    case KvDtype::kInt3Chan:
    case KvDtype::kInt2Chan:
    case KvDtype::kInt4Chan64:
    case KvDtype::kInt3Chan64:
    case KvDtype::kInt2Chan64:
    case KvDtype::kInt2MixChan64: return;  // above
  }
}

template <int NG>
static void AccumulateValuesFor(KvDtype dtype, const RangeArgs& r, float* out, float* buf) {
  if (!readers_fit(dtype, r.a->kv.head_dim)) return AccumulateValuesScalar<NG>(r, out, buf);
  switch (dtype) {
    case KvDtype::kF32: return AccumulateValues<ReadF32, NG>(r, out);
    case KvDtype::kF16: return AccumulateValues<ReadF16, NG>(r, out);
    case KvDtype::kBF16: return AccumulateValues<ReadBF16, NG>(r, out);
    case KvDtype::kFp8E4M3: return AccumulateValues<ReadFp8E4M3, NG>(r, out);
    case KvDtype::kFp8E5M2: return AccumulateValues<ReadFp8E5M2, NG>(r, out);
    case KvDtype::kFp8E4M3Dyn: return AccumulateValues<ReadFp8E4M3Dyn, NG>(r, out);
    case KvDtype::kInt8:
    case KvDtype::kInt8Had: return AccumulateValues<ReadInt8, NG>(r, out);
    case KvDtype::kInt4:
    case KvDtype::kQ4_0:
    case KvDtype::kInt4Had: return AccumulateValues<ReadQ4, NG>(r, out);
    case KvDtype::kInt3Had: return AccumulateValues<ReadLowBit<3>, NG>(r, out);
    case KvDtype::kInt2Had: return AccumulateValues<ReadLowBit<2>, NG>(r, out);
    case KvDtype::kInt2Had64: return AccumulateValues<ReadLowBit<2, kLowBitGroup64>, NG>(r, out);
    case KvDtype::kInt2Tcq64:
#if HWY_TARGET != HWY_SCALAR  // the same bits as the SIMD targets' reader (one FMA per key)
      if (const trellis_values::AccumulateFn vbmi = trellis_values::active();
          vbmi != nullptr && r.a->kv.head_dim <= trellis_values::kMaxHeadDim) {
        const PagedAttentionArgs& a = *r.a;
        return vbmi(a.kv, a.block_table[r.t], a.layer, r.kvh, r.j0, r.j1, r.scores, NG, out);
      }
#endif
      return AccumulateValues<ReadTrellis, NG>(r, out);
    case KvDtype::kQ8_0:
    case KvDtype::kQ8_0Had: return AccumulateValues<ReadQ8, NG>(r, out);
    case KvDtype::kInt4Chan:
    case KvDtype::kInt3Chan:
    case KvDtype::kInt2Chan:
    case KvDtype::kInt4Chan64:
    case KvDtype::kInt3Chan64:
    case KvDtype::kInt2Chan64:
    case KvDtype::kInt2MixChan64: KVS_CHECK_MSG(false, "per-channel formats hold keys only");
  }
}

// One range of keys for NG query heads -> Partial (acc zeroed here). `scored`: r.scores already
// holds the range's scores (key tiles, AttendHeadsTiled); only the softmax and values remain.
template <int NG>
static void AttendRange(const RangeArgs& r, const Partial& out, float* buf, bool scored) {
  const PagedKvLayout& kv = r.a->kv;
  const uint32_t D = kv.head_dim;
  const int32_t len = r.j1 - r.j0;
  std::memset(out.acc, 0, sizeof(float) * NG * D);
  if (len <= 0) {
    for (int g = 0; g < NG; ++g) {
      out.m[g] = -INFINITY;
      out.l[g] = 0.0f;
    }
    return;
  }
  if (!scored) ScoreKeysFor<NG>(kv.k_dtype, r, buf);
  for (int g = 0; g < NG; ++g) {
    float* sc = r.scores + g * len;
    out.m[g] = MaxOf(sc, len);
    out.l[g] = ExpSubAndSum(sc, len, out.m[g]);
  }
  AccumulateValuesFor<NG>(kv.v_dtype, r, out.acc, buf);
}

static void AttendRangeAnyNG(int ng, const RangeArgs& r, const Partial& out, float* buf,
                             bool scored = false) {
  switch (ng) {
    case 1: return AttendRange<1>(r, out, buf, scored);
    case 2: return AttendRange<2>(r, out, buf, scored);
    case 3: return AttendRange<3>(r, out, buf, scored);
    default: return AttendRange<4>(r, out, buf, scored);
  }
}

struct Scratch {
  std::vector<float> scores;      // [NG][range]
  std::vector<float> key_scales;  // [range]
  std::vector<float> buf;         // [head_dim] for the scalar fallback
  std::vector<float> part;        // [heads][D + 2] when not written to the call's partials
  std::vector<KeyRange> ranges;   // a causal group's members' keys
  std::vector<float> q;           // [heads][D]: queries gathered and/or rotated
  hwy::AlignedFreeUniquePtr<float[]> tile;  // [head_dim][16] (key tiles), aligned for stores
  size_t tile_floats = 0;
  // A shared segment's int8 queries, gathered from QueriesInt8.
  std::vector<int8_t> q8;
  std::vector<int16_t> q16;
  std::vector<int32_t> qsum;
  std::vector<float> dq;
};

// int8 K: every query head of the call quantized once (kernels/int8_key_dots.h), before the
// items that share it (one per kv head and segment of its token).
struct QueriesInt8 {
  std::vector<int8_t> q8;     // [T][H][D]
  std::vector<int16_t> q16;   // [T][H][D]
  std::vector<int32_t> qsum;  // [T][H]
  std::vector<float> dq;      // [T][H]

  // with_q16: also the int16 copy the Highway path reads (the VNNI kernels read q8). rotated:
  // the queries are rotated first (int8_had keys, stored rotated).
  void quantize(const PagedAttentionArgs& a, ThreadPool& pool, bool with_q16, bool rotated) {
    const uint32_t D = a.kv.head_dim;
    const size_t heads = static_cast<size_t>(a.num_tokens) * a.num_heads;
    // Each array on its own: a call with more heads of a smaller head dim needs more sums.
    if (q8.size() < heads * D) q8.resize(heads * D);
    if (qsum.size() < heads) qsum.resize(heads);
    if (dq.size() < heads) dq.resize(heads);
    if (with_q16 && q16.size() < heads * D) q16.resize(heads * D);
    auto run = [&](size_t begin, size_t end, int) {
      thread_local std::vector<float> turned;
      if (rotated && turned.size() < D) turned.resize(D);
      for (size_t h = begin; h < end; ++h) {
        const float* q = a.q + h * D;
        if (rotated) {
          std::memcpy(turned.data(), q, sizeof(float) * D);
          HadamardRotate(turned.data(), D);
          q = turned.data();
        }
        dq[h] = quantize_query_int8(q, D, q8.data() + h * D, &qsum[h]);
        if (with_q16)
          for (size_t i = h * D; i < (h + 1) * D; ++i) q16[i] = q8[i];
      }
    };
    if (heads * D < 16384) {
      run(0, heads, 0);  // a decode step's few heads: not worth waking the pool
    } else {
      pool.parallel_for(heads, 64, run);
    }
  }
};

constexpr int kMaxNG = 4;  // query heads per pass over K/V (accumulators in registers)

// The query heads that passes over one key range serve, as rows of D: float queries (rotated
// for a rotated K format read as floats) and, for int8 K, their int8 forms (of the rotated
// query for int8_had).
struct HeadRows {
  uint32_t heads = 0;
  const float* q = nullptr;
  const int8_t* q8 = nullptr;
  const int16_t* q16 = nullptr;  // only for the Highway int8 path
  const int32_t* qsum = nullptr;
  const float* dq = nullptr;
};

// The arguments of the pass over keys k for the query heads h0.. of `rows` (up to kMaxNG), with
// their scores at `scores` ([heads][range]).
static RangeArgs PassArgs(const PagedAttentionArgs& a, int64_t t, uint32_t kvh, KeyRange k,
                          const HeadRows& rows, uint32_t h0, float* scores, float* key_scales,
                          const int8_key_dots::Kernels* int8_dots) {
  const uint32_t D = a.kv.head_dim;
  return RangeArgs{.a = &a,
                   .t = t,
                   .kvh = kvh,
                   .j0 = k.first,
                   .j1 = k.end,
                   .q = rows.q + h0 * D,
                   .scores = scores,
                   .key_scales = key_scales,
                   .q8 = rows.q8 != nullptr ? rows.q8 + h0 * D : nullptr,
                   .q16 = rows.q16 != nullptr ? rows.q16 + h0 * D : nullptr,
                   .qsum = rows.qsum != nullptr ? rows.qsum + h0 : nullptr,
                   .dq = rows.dq != nullptr ? rows.dq + h0 : nullptr,
                   .int8_dots = int8_dots};
}

#if KVS_ATTENTION_KEY_TILES
// More heads than one pass takes (a shared segment's rows) over f16 keys, on targets with key
// tiles (kernels/attention_key_tiles-inl.h): the scores of 16 keys at a time for every pass from
// one converted, transposed tile, then each pass's softmax and value sum (V in any format) over
// its keys by AttendRange. Every float is AttendRange's (the tiles' scores are ScoreKeys', bit for
// bit). A causal group (kernels/attention_segments.h): member i, the query heads [i x per,
// (i + 1) x per) of `rows`, reads its keys ranges[i] within k; with ranges == nullptr every head
// reads k (per = rows.heads). The tiles cover k, built through token t's table.
static void AttendHeadsTiled(const PagedAttentionArgs& a, int64_t t, uint32_t kvh, KeyRange k,
                             const HeadRows& rows, const KeyRange* ranges, uint32_t per,
                             float* base, Scratch& s) {
  const uint32_t D = a.kv.head_dim, n = rows.heads, members = n / per;
  auto range_of = [&](uint32_t i) { return ranges != nullptr ? ranges[i] : k; };
  // Scores member by member, [per][its keys], after kTileKeys floats that a member's first tile
  // may address before its first key (those lanes are never stored).
  size_t total = kTileKeys;
  for (uint32_t i = 0; i < members; ++i) {
    const KeyRange ki = range_of(i);
    total += size_t{per} * (ki.end - ki.first);
  }
  if (s.scores.size() < total) s.scores.resize(total);
  if (s.tile_floats < size_t{D} * kTileKeys) {
    s.tile_floats = size_t{D} * kTileKeys;
    s.tile = hwy::AllocateAligned<float>(s.tile_floats);
  }
  float* const tile = s.tile.get();
  float* const scores = s.scores.data() + kTileKeys;
  for (int32_t j = k.first; j < k.end; j += kTileKeys) {
    const int32_t m = std::min(kTileKeys, k.end - j);
    BuildKeyTile(a, t, kvh, j, m, tile);
    size_t off = 0;
    for (uint32_t i = 0; i < members; ++i) {
      const KeyRange ki = range_of(i);
      const int32_t len = ki.end - ki.first;
      // The tile's lanes [lo, hi) are this member's keys.
      const int32_t lo = std::max(0, ki.first - j), hi = std::min(m, ki.end - j);
      for (uint32_t h0 = 0; h0 < per && lo < hi; h0 += kMaxNG) {
        const float* q = rows.q + size_t{i * per + h0} * D;
        float* out = scores + off + size_t{h0} * len + (j - ki.first);
        switch (std::min<uint32_t>(kMaxNG, per - h0)) {
          case 1: TileScoresD<1>(tile, q, D, a.scale, lo, hi, out, len); break;
          case 2: TileScoresD<2>(tile, q, D, a.scale, lo, hi, out, len); break;
          case 3: TileScoresD<3>(tile, q, D, a.scale, lo, hi, out, len); break;
          default: TileScoresD<4>(tile, q, D, a.scale, lo, hi, out, len); break;
        }
      }
      off += size_t{per} * len;
    }
  }
  size_t off = 0;
  for (uint32_t i = 0; i < members; ++i) {
    const KeyRange ki = range_of(i);
    const int32_t len = ki.end - ki.first;
    for (uint32_t h0 = 0; h0 < per; h0 += kMaxNG) {
      const uint32_t h = i * per + h0;
      const int ng = static_cast<int>(std::min<uint32_t>(kMaxNG, per - h0));
      const RangeArgs r =
          PassArgs(a, t, kvh, ki, rows, h, scores + off + size_t{h0} * len, nullptr, nullptr);
      const Partial p{.acc = base + h * D, .m = base + n * D + h, .l = base + n * (D + 1) + h};
      AttendRangeAnyNG(ng, r, p, s.buf.data(), /*scored=*/true);
    }
    off += size_t{per} * len;
  }
}

#endif

// Keys k of kv head kvh, through token t's block table, for every head of `rows`, kMaxNG heads
// per pass. The partials go to `base`: acc [heads][D], then m [heads], then l [heads]. Each head's
// arithmetic is independent of the others in its pass, so a head's partial does not depend on
// which heads share its passes (the basis of shared-segment attention). `tiles`: more heads than
// a pass takes may be scored from key tiles (f16 keys); one token's heads always may (a model
// with more than kMaxNG query heads per KV head).
static void AttendHeads(const PagedAttentionArgs& a, int64_t t, uint32_t kvh, KeyRange k,
                        const HeadRows& rows, const int8_key_dots::Kernels* int8_dots, float* base,
                        Scratch& s, bool tiles) {
  const uint32_t D = a.kv.head_dim, n = rows.heads;
#if KVS_ATTENTION_KEY_TILES
  if (tiles && n > kMaxNG && k.end > k.first && a.kv.k_dtype == KvDtype::kF16 && D % 16 == 0)
    return AttendHeadsTiled(a, t, kvh, k, rows, nullptr, n, base, s);
#else
  (void)tiles;
#endif
  const size_t need = size_t(kMaxNG) * std::max(1, k.end - k.first);
  if (s.scores.size() < need) s.scores.resize(need);
  if (s.key_scales.size() < size_t(std::max(1, k.end - k.first)))
    s.key_scales.resize(k.end - k.first);
  for (uint32_t h0 = 0; h0 < n; h0 += kMaxNG) {
    const int ng = static_cast<int>(std::min<uint32_t>(kMaxNG, n - h0));
    const RangeArgs r =
        PassArgs(a, t, kvh, k, rows, h0, s.scores.data(), s.key_scales.data(), int8_dots);
    const Partial p{.acc = base + h0 * D, .m = base + n * D + h0, .l = base + n * (D + 1) + h0};
    AttendRangeAnyNG(ng, r, p, s.buf.data());
  }
}

void PagedAttention(const PagedAttentionArgs& a, ThreadPool& pool) {
  const PagedKvLayout& kv = a.kv;
  const uint32_t D = kv.head_dim;
  const uint32_t group = a.num_heads / kv.kv_heads;
  const uint32_t KH = kv.kv_heads;
  const int64_t T = a.num_tokens;
  if (T == 0 || KH == 0) return;
  // A token's context is cut into segments (kernels/attention_segments.h), attended separately
  // and merged in order with the usual max/sum rescaling; one item per (segment, kv head), also
  // the unit of parallelism, which keeps every thread busy in decode. first_seg[t]: index of
  // token t's first segment; its segment s and kv head h are item (first_seg[t] + s) * KH + h.
  thread_local std::vector<int64_t> first_seg;
  first_seg.resize(static_cast<size_t>(T) + 1);
  first_seg[0] = 0;
  bool any_split = false;
  for (int64_t t = 0; t < T; ++t) {
    const int32_t ns = attention_segments(a, t);
    any_split |= ns > 1;
    first_seg[t + 1] = first_seg[t] + ns;
  }
  const int64_t items = first_seg[T] * KH;
  // Segments several tokens read through the same blocks: one item per (group, kv head), run
  // first; the items of the segments they cover are skipped.
  thread_local SharedSegmentPlan plan;
  // Causal groups (a prefill chunk's tokens, whose last segments end at their own positions) on
  // targets whose key tiles read them: f16 keys, head dims of whole tiles; only where two tokens
  // of one sequence are in the call (a sequence's tokens are neighbours in the batch), so that a
  // step of decode tokens alone does not plan them.
#if KVS_ATTENTION_KEY_TILES
  bool causal = a.share_segments && kv.k_dtype == KvDtype::kF16 && D % 16 == 0;
  if (causal) {
    causal = false;
    for (int64_t t = 1; t < T && !causal; ++t) causal = a.block_table[t] == a.block_table[t - 1];
  }
#else
  const bool causal = false;
#endif
  if (a.share_segments && (any_split || causal)) {
    plan_shared_segments(a, first_seg, causal, &plan);
  } else {
    plan.groups.clear();
  }
  const int64_t shared_items = static_cast<int64_t>(plan.groups.size()) * KH;
  // Rotated formats are read in the rotated space (q rotated, output rotated back) when the
  // readers handle them; the scalar fallback decodes to the original space instead, except
  // int8_had's keys, always scored against the rotated int8 query (k_int8 below).
  const bool k_rotated = kv_dtype_rotated(kv.k_dtype) && readers_fit(kv.k_dtype, D);
  const bool v_rotated = kv_dtype_rotated(kv.v_dtype) && readers_fit(kv.v_dtype, D);
  // Scored against int8 queries: int8 keys, and int8_had keys against the rotated queries (on
  // every path, the scalar fallback's too: its integer scores are in the stored space).
  const bool k_int8 = kv_dtype_int8_keys(kv.k_dtype);
  // The VNNI kernels score int8 keys and 4-bit and int2mix per-channel keys (their codes against
  // an int8 query, kernels/attention_channel_keys-inl.h) where the CPU has them and the head dim
  // fits their vectors.
  const bool k_int_channels = kv_dtype_per_channel(kv.k_dtype) &&
                              int8_key_dots::channel_keys_in_int8(channel_bits(kv.k_dtype));
  const int8_key_dots::Kernels* int8_dots =
      k_int8 || k_int_channels ? int8_key_dots::active() : nullptr;
  if (int8_dots != nullptr && (!readers_fit(kv.k_dtype, D) || D % int8_dots->chunk != 0))
    int8_dots = nullptr;
  const bool with_q16 = k_int8 && int8_dots == nullptr;
  // The float queries rotated for the score pass (int8_had's scores read the int8 queries, which
  // QueriesInt8 rotates).
  const bool rotate_q = k_rotated && !k_int8;
  thread_local QueriesInt8 queries_int8;
  if (k_int8) queries_int8.quantize(a, pool, with_q16, kv.k_dtype == KvDtype::kInt8Had);
  const QueriesInt8& qi = queries_int8;  // the caller's (a thread_local is per worker)
  const size_t part_stride = size_t{group} * (D + 2);  // acc [group][D], m [group], l [group]
  thread_local std::vector<float> partials;
  if (any_split && partials.size() < static_cast<size_t>(items) * part_stride)
    partials.resize(static_cast<size_t>(items) * part_stride);
  float* const partials_data = partials.data();
  const int64_t* const first = first_seg.data();
  const SharedSegmentPlan& sp = plan;  // the caller's
  // Query heads of kv head kvh of token t, rows [group][D] of the call's arrays.
  auto rows_of = [&](int64_t t, uint32_t kvh) {
    const size_t head0 = static_cast<size_t>(t) * a.num_heads + size_t{kvh} * group;
    return HeadRows{.heads = group,
                    .q = a.q + head0 * D,
                    .q8 = k_int8 ? qi.q8.data() + head0 * D : nullptr,
                    .q16 = with_q16 ? qi.q16.data() + head0 * D : nullptr,
                    .qsum = k_int8 ? qi.qsum.data() + head0 : nullptr,
                    .dq = k_int8 ? qi.dq.data() + head0 : nullptr};
  };
  // A one-segment token's output of query head g of kv head kvh from its finished partial.
  auto write_output = [&](int64_t t, uint32_t kvh, uint32_t g, const float* acc, float l) {
    float* o = a.out + (t * a.num_heads + kvh * group + g) * D;
    ScaleRow(acc, 1.0f / l, D, o);
    if (v_rotated) HadamardRotate(o, D);  // H (sum p H v) = sum p v
  };
  // One shared segment for one kv head: the members' heads gathered into rows, attended in one
  // set of passes, their partials scattered to each member's item (a one-segment member of a
  // causal group: its output).
  auto attend_shared = [&](const SharedSegmentPlan::Group& grp, uint32_t kvh, Scratch& s) {
    const uint32_t n = grp.count * group;
    if (s.q.size() < size_t{n} * D) s.q.resize(size_t{n} * D);
    if (k_int8) {
      if (s.q8.size() < size_t{n} * D) s.q8.resize(size_t{n} * D);
      if (with_q16 && s.q16.size() < size_t{n} * D) s.q16.resize(size_t{n} * D);
      if (s.qsum.size() < n) s.qsum.resize(n);
      if (s.dq.size() < n) s.dq.resize(n);
    }
    for (uint32_t i = 0; i < grp.count; ++i) {
      const HeadRows src = rows_of(sp.tokens[grp.first + i], kvh);
      const size_t o = size_t{i} * group;
      std::memcpy(s.q.data() + o * D, src.q, sizeof(float) * group * D);
      if (rotate_q)
        for (uint32_t g = 0; g < group; ++g) HadamardRotate(s.q.data() + (o + g) * D, D);
      if (k_int8) {
        std::memcpy(s.q8.data() + o * D, src.q8, size_t{group} * D);
        if (with_q16) std::memcpy(s.q16.data() + o * D, src.q16, sizeof(int16_t) * group * D);
        std::memcpy(s.qsum.data() + o, src.qsum, sizeof(int32_t) * group);
        std::memcpy(s.dq.data() + o, src.dq, sizeof(float) * group);
      }
    }
    const HeadRows rows{.heads = n,
                        .q = s.q.data(),
                        .q8 = k_int8 ? s.q8.data() : nullptr,
                        .q16 = with_q16 ? s.q16.data() : nullptr,
                        .qsum = k_int8 ? s.qsum.data() : nullptr,
                        .dq = k_int8 ? s.dq.data() : nullptr};
    if (s.part.size() < size_t{n} * (D + 2)) s.part.resize(size_t{n} * (D + 2));
    float* const part = s.part.data();
    if (grp.causal) {
#if KVS_ATTENTION_KEY_TILES
      if (s.ranges.size() < grp.count) s.ranges.resize(grp.count);
      for (uint32_t i = 0; i < grp.count; ++i)
        s.ranges[i] =
            attention_segment_keys(a, sp.tokens[grp.first + i], sp.segments[grp.first + i]);
      AttendHeadsTiled(a, sp.tokens[grp.first], kvh, grp.keys, rows, s.ranges.data(), group, part,
                       s);
#else
      KVS_CHECK_MSG(false, "causal groups are planned only where key tiles read them");
#endif
    } else {
      // Key tiles for an exact group where they pay (Zen 5, attention_bench): at head dim 64
      // only for one sequence's tokens (a prefill chunk: 2-3% faster), not across sequences
      // sharing a cached prefix, whose decode steps they made up to 1.9x slower (the tile's
      // conversion and transposition cost more than reading the keys once per token); at head
      // dims of 128 and more always (Gemma 3: 5-14% faster).
      const bool one_sequence = a.block_table[sp.tokens[grp.first]] ==
                                a.block_table[sp.tokens[grp.first + grp.count - 1]];
      AttendHeads(a, sp.tokens[grp.first], kvh, grp.keys, rows, int8_dots, part, s,
                  /*tiles=*/D >= 128 || one_sequence);
    }
    for (uint32_t i = 0; i < grp.count; ++i) {
      const int64_t t = sp.tokens[grp.first + i];
      if (first[t + 1] - first[t] == 1) {
        for (uint32_t g = 0; g < group; ++g) {
          const size_t h = size_t{i} * group + g;
          write_output(t, kvh, g, part + h * D, part[size_t{n} * (D + 1) + h]);
        }
        continue;
      }
      float* dst =
          partials_data + ((first[t] + sp.segments[grp.first + i]) * KH + kvh) * part_stride;
      for (uint32_t g = 0; g < group; ++g) {
        const size_t h = size_t{i} * group + g;
        std::memcpy(dst + g * D, part + h * D, sizeof(float) * D);
        dst[group * D + g] = part[size_t{n} * D + h];
        dst[group * (D + 1) + g] = part[size_t{n} * (D + 1) + h];
      }
    }
  };
  pool.parallel_for(
      static_cast<size_t>(shared_items + items), 1, [&](size_t begin, size_t end, int) {
        thread_local Scratch s;
        if (s.buf.size() < D) s.buf.resize(D);
        for (size_t it = begin; it < end; ++it) {
          if (static_cast<int64_t>(it) < shared_items) {
            attend_shared(sp.groups[it / KH], static_cast<uint32_t>(it % KH), s);
            continue;
          }
          const int64_t item = static_cast<int64_t>(it) - shared_items;
          // Segment-major: the kv heads of one segment are neighbours in memory (kv_block_storage
          // keeps a block's heads of one layer together) and follow each other here, so the
          // hardware prefetcher runs on from one head's region into the next.
          const int64_t segment = item / KH;
          const uint32_t kvh = static_cast<uint32_t>(item % KH);
          const int64_t t = std::upper_bound(first, first + T + 1, segment) - first - 1;
          const int64_t ns = first[t + 1] - first[t];
          // Attended by a group.
          if (!sp.groups.empty() && sp.shared[segment] != 0) continue;
          const KeyRange k = attention_segment_keys(a, t, static_cast<int32_t>(segment - first[t]));
          float* base;
          if (ns > 1) {
            base = partials_data + item * part_stride;
          } else {
            if (s.part.size() < part_stride) s.part.resize(part_stride);
            base = s.part.data();
          }
          HeadRows rows = rows_of(t, kvh);
          if (k.recent) {
            AttendRecent(a, t, kvh, k, group, v_rotated, base, s.scores);
          } else if (rotate_q) {  // H q for all heads of the group, once per item
            if (s.q.size() < size_t{group} * D) s.q.resize(size_t{group} * D);
            std::memcpy(s.q.data(), rows.q, sizeof(float) * group * D);
            for (uint32_t g = 0; g < group; ++g) HadamardRotate(s.q.data() + g * D, D);
            rows.q = s.q.data();
          }
          if (!k.recent) AttendHeads(a, t, kvh, k, rows, int8_dots, base, s, /*tiles=*/true);
          if (ns == 1)
            for (uint32_t g = 0; g < group; ++g)
              write_output(t, kvh, g, base + g * D, base[group * (D + 1) + g]);
        }
      });
  if (!any_split) return;
  // Merge the segments of split tokens, each token on its own (a long prefill's tokens have
  // several segments each: run serially, this was a tenth of a 2K-token prefill's attention).
  const size_t seg_stride = size_t{KH} * part_stride;  // segment-major items
  const auto grain = static_cast<size_t>(std::max<int64_t>(1, T / (4 * pool.num_threads())));
  pool.parallel_for(static_cast<size_t>(T), grain, [&](size_t begin, size_t end, int) {
    for (size_t t = begin; t < end; ++t) {
      const int64_t ns = first[t + 1] - first[t];
      if (ns == 1) continue;
      for (uint32_t kvh = 0; kvh < KH; ++kvh)
        MergeSegments(a, static_cast<int64_t>(t), kvh,
                      partials_data + (first[t] * KH + kvh) * part_stride, ns, seg_stride,
                      v_rotated);
    }
  });
}

static float AttentionExpSubAndSum(float* x, int32_t n, float m) { return ExpSubAndSum(x, n, m); }

}  // namespace HWY_NAMESPACE
}  // namespace kvs
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kvs {
HWY_EXPORT(PagedAttention);
HWY_EXPORT(AttentionExpSubAndSum);

float attention_exp_sub_and_sum(float* x, int32_t n, float m) {
  return HWY_DYNAMIC_DISPATCH(AttentionExpSubAndSum)(x, n, m);
}

void paged_attention(const PagedAttentionArgs& args, ThreadPool& pool) {
  KVS_CHECK(args.kv.kv_heads > 0 && args.num_heads % args.kv.kv_heads == 0);
  HWY_DYNAMIC_DISPATCH(PagedAttention)(args, pool);
}

}  // namespace kvs
#endif
