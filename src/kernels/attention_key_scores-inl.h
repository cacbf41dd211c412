// The score pass of paged attention (one copy per SIMD target): q . k for a range of keys and
// a batch of NG query heads, each key converted once for all NG heads; and the arguments of one
// pass over a key range, which the value pass shares. Included by paged_attention.cpp after
// kernels/kv_readers-inl.h, once per target.

// Per-target include guard (Highway's convention for -inl headers).
#if defined(KVS_KERNELS_ATTENTION_KEY_SCORES_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef KVS_KERNELS_ATTENTION_KEY_SCORES_INL_H_
#undef KVS_KERNELS_ATTENTION_KEY_SCORES_INL_H_
#else
#define KVS_KERNELS_ATTENTION_KEY_SCORES_INL_H_
#endif

#include <algorithm>
#include <cstdint>

#include <hwy/cache_control.h>
#include <hwy/highway.h>

#include "kernels/int8_key_dots.h"
#include "kernels/paged_attention_args.h"
#include "quant/kv_format.h"

HWY_BEFORE_NAMESPACE();
namespace kvs {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// DF, VF and the format readers (Read*) come from kernels/kv_readers-inl.h.

// Complete unrolling of the loops over query heads and chunks, so that the accumulator arrays
// live in registers (GCC -O2 would otherwise keep them on the stack).
#define KVS_UNROLL _Pragma("GCC unroll 16")

// Prefetches the `bytes` of one (block, head) region of K or V: the blocks of a sequence are
// scattered over the pool, so the hardware prefetcher cannot see the next one coming.
static HWY_INLINE void PrefetchRegion(const uint8_t* p, uint64_t bytes) {
  for (uint64_t o = 0; o < bytes; o += 64) hwy::Prefetch(p + o);
}

// Regions to prefetch a few lines at a time, spread over a block's keys: up to two, issued in
// the order added. Plain members (no arrays indexed at run time), so that the cursor lives in
// registers: kept in arrays, it was stored and reloaded for every line, as many instructions
// per 4 keys as their dot products at head dim 256.
struct PrefetchCursor {
  const uint8_t* p0 = nullptr;
  const uint8_t* p1 = nullptr;
  uint64_t bytes0 = 0, bytes1 = 0;  // the regions' sizes
  uint64_t done0 = 0, done1 = 0;    // bytes issued (whole lines)
  void Add(const uint8_t* region, uint64_t bytes) {
    if (p0 == nullptr) {
      p0 = region;
      bytes0 = bytes;
    } else {
      p1 = region;
      bytes1 = bytes;
    }
  }
  // Lines per call for the whole to go out in `steps` calls.
  uint32_t LinesPer(int32_t steps) const {
    const uint64_t lines = (bytes0 + 63) / 64 + (bytes1 + 63) / 64;
    return static_cast<uint32_t>((lines + std::max(1, steps) - 1) / std::max(1, steps));
  }
  HWY_INLINE void Issue(uint32_t lines) {
    for (; lines > 0 && done0 < bytes0; --lines, done0 += 64) hwy::Prefetch(p0 + done0);
    for (; lines > 0 && done1 < bytes1; --lines, done1 += 64) hwy::Prefetch(p1 + done1);
  }
};

// ---- One (token, kv head, key range, batch of NG query heads) ---------------------------------

// What a range of keys contributes to NG query heads: unnormalised output (sum of
// exp(s - m) v), the running max m and the sum of exp(s - m).
struct Partial {
  float* acc;  // [NG][D]
  float* m;    // [NG]
  float* l;    // [NG]
};

struct RangeArgs {
  const PagedAttentionArgs* a;
  int64_t t;
  uint32_t kvh;
  int32_t j0, j1;     // key positions [j0, j1)
  const float* q;     // [NG][head_dim] queries of the batch (rotated for a rotated K format
                      // read as floats)
  float* scores;      // [NG][j1 - j0] scratch
  float* key_scales;  // [j1 - j0] scratch
  // int8 keys (kernels/int8_key_dots.h): the batch's queries quantized to int8, as int8 and
  // int16 copies, with their sums and scales.
  const int8_t* q8 = nullptr;     // [NG][head_dim]
  const int16_t* q16 = nullptr;   // [NG][head_dim]
  const int32_t* qsum = nullptr;  // [NG]
  const float* dq = nullptr;      // [NG]
  // The VNNI kernels that score them, or nullptr for the Highway int16 path.
  const int8_key_dots::Kernels* int8_dots = nullptr;
};

// What to fetch while block b's keys (from key j on) are scored: K two blocks ahead (one block's
// arithmetic is too short to hide a miss), and this block's V, which the value pass reads right
// after the scores. The caller requests the lines a few per four keys rather than all at once: a
// burst fills the core's miss buffers and stalls the arithmetic until memory answers. The first
// block of a range requests the next block's K here, at once.
static HWY_INLINE PrefetchCursor BlockPrefetch(const RangeArgs& r, int32_t j, int32_t b) {
  const PagedAttentionArgs& a = *r.a;
  const PagedKvLayout& kv = a.kv;
  const int32_t bs = static_cast<int32_t>(kv.block_size);
  const uint32_t* table = a.block_table[r.t];
  if (j == r.j0 && (b + 1) * bs < r.j1)
    PrefetchRegion(kv.k_head(table[b + 1], a.layer, r.kvh), uint64_t(bs) * kv.k_vector_bytes);
  PrefetchCursor pf;
  if ((b + 2) * bs < r.j1)
    pf.Add(kv.k_head(table[b + 2], a.layer, r.kvh), uint64_t(bs) * kv.k_vector_bytes);
  pf.Add(kv.v_head(table[b], a.layer, r.kvh), uint64_t(bs) * kv.v_vector_bytes);
  return pf;
}

// One chunk of L elements of an ungrouped key (i) or one group (R::kGroupElems elements) of a
// grouped key, for all NG query heads: the bodies of KeyDot's loop.
template <class R, int NG>
static HWY_INLINE void KeyChunk(DF df, const uint8_t* k, const float* q, uint32_t D, size_t i,
                                VF* acc) {
  if constexpr (!R::kGrouped) {
    const VF x = R::Load(df, k, i);
    KVS_UNROLL
    for (int g = 0; g < NG; ++g) acc[g] = hn::MulAdd(hn::LoadU(df, q + g * D + i), x, acc[g]);
  } else {
    const size_t L = hn::Lanes(df);
    const uint8_t* gp = k + (i / R::kGroupElems) * R::kGroupBytes;
    VF part[NG];
    KVS_UNROLL
    for (int g = 0; g < NG; ++g) part[g] = hn::Zero(df);
    KVS_UNROLL
    for (size_t e = 0; e < R::kGroupElems; e += L) {
      const VF x = R::Load(df, gp, e);
      KVS_UNROLL
      for (int g = 0; g < NG; ++g)
        part[g] = hn::MulAdd(hn::LoadU(df, q + g * D + i + e), x, part[g]);
    }
    const VF gs = hn::Set(df, R::Scale(gp));
    KVS_UNROLL
    for (int g = 0; g < NG; ++g) acc[g] = hn::MulAdd(part[g], gs, acc[g]);
  }
}

// acc[g] = q_g . k lane-wise partial sums for one key, without the scale of an ungrouped
// format (grouped formats apply their group scales inside). K is converted once for all NG
// query heads. With the head dim known at compile time (kD) the loop unrolls completely; a
// runtime head dim keeps a plain loop (unrolling it would multiply the code of every format).
template <class R, int NG, uint32_t kD>
static HWY_INLINE void KeyDot(DF df, const uint8_t* k, const float* q, uint32_t D, VF* acc) {
  size_t step = hn::Lanes(df);
  if constexpr (R::kGrouped) step = R::kGroupElems;
  KVS_UNROLL
  for (int g = 0; g < NG; ++g) acc[g] = hn::Zero(df);
  if constexpr (kD != 0) {
    KVS_UNROLL
    for (size_t i = 0; i < kD; i += step) KeyChunk<R, NG>(df, k, q, kD, i, acc);
  } else {
    for (size_t i = 0; i < D; i += step) KeyChunk<R, NG>(df, k, q, D, i, acc);
  }
}

// The int8 format's keys scored against int8 queries (kernels/int8_key_dots.h): exact int32
// sums of int16 products (vpmaddwd), converted to f32 lanes (exact below 2^24), so every target
// and the VNNI kernels give the same sums. Its scale factor is the key's f16 scale, as ReadInt8.
struct ScoreInt8 : Ungrouped<true> {
  static constexpr bool kIntegerQuery = true;
};
template <class R>
constexpr bool IntegerQuery() {
  if constexpr (requires { R::kIntegerQuery; }) {
    return true;
  } else {
    return false;
  }
}
// int16 lanes of one full vector (the scalar target has one lane of each type).
#if HWY_TARGET == HWY_SCALAR
using DI16 = hn::Rebind<int16_t, DF>;
#else
using DI16 = hn::Repartition<int16_t, DF>;
#endif
static bool int8_scores_fit(uint32_t D) {
  const DI16 d16;
  return D % hn::Lanes(d16) == 0;
}

template <int NG, uint32_t kD>
static HWY_INLINE void KeyDotInt8(DF df, const uint8_t* k, const int16_t* q, uint32_t D, VF* acc) {
  const DI16 d16;
  const hn::RebindToSigned<DF> d32;
  const hn::Rebind<int8_t, decltype(d16)> d8;
  const size_t L16 = hn::Lanes(d16);
  const auto* kb = reinterpret_cast<const int8_t*>(k);
  hn::Vec<decltype(d32)> s0[NG], s1[NG];
  KVS_UNROLL
  for (int g = 0; g < NG; ++g) s0[g] = s1[g] = hn::Zero(d32);
  const uint32_t n = kD != 0 ? kD : D;
  KVS_UNROLL
  for (size_t i = 0; i < n; i += L16) {
    const auto x = hn::PromoteTo(d16, hn::LoadU(d8, kb + i));
    KVS_UNROLL
    for (int g = 0; g < NG; ++g)
      s0[g] = hn::ReorderWidenMulAccumulate(d32, x, hn::LoadU(d16, q + g * n + i), s0[g], s1[g]);
  }
  KVS_UNROLL
  for (int g = 0; g < NG; ++g) acc[g] = hn::ConvertTo(df, hn::RearrangeToOddPlusEven(s0[g], s1[g]));
}

// One key's lane sums for the batch's heads: float queries, or int16 ones for ScoreInt8.
template <class R, int NG, uint32_t kD>
static HWY_INLINE void DotKey(DF df, const uint8_t* k, const RangeArgs& r, uint32_t D, VF* acc) {
  if constexpr (IntegerQuery<R>()) {
    KeyDotInt8<NG, kD>(df, k, r.q16, D, acc);
  } else {
    KeyDot<R, NG, kD>(df, k, r.q, D, acc);
  }
}

// Four horizontal sums at once: out[u] = sum of the lanes of a[u] times f[u], or with `add`,
// (sum + add[u]) times f[u]. Pairs of interleaves leave each 128-bit block holding (a0, a1, a2,
// a3) partial sums, then the blocks are folded: about 3 operations per sum instead of
// SumOfLanes' 8.
#if HWY_TARGET == HWY_SCALAR
constexpr bool kReduce4 = false;
#else
constexpr bool kReduce4 = hn::MaxLanes(DF()) >= 4 && hn::MaxLanes(DF()) <= 16;
#endif

static HWY_INLINE void Reduce4(DF df, VF a0, VF a1, VF a2, VF a3, const float* f, float* out,
                               const float* add = nullptr) {
#if HWY_TARGET != HWY_SCALAR
  const hn::Repartition<uint64_t, DF> du64;
  const VF b01 = hn::Add(hn::InterleaveLower(df, a0, a1), hn::InterleaveUpper(df, a0, a1));
  const VF b23 = hn::Add(hn::InterleaveLower(df, a2, a3), hn::InterleaveUpper(df, a2, a3));
  const auto w01 = hn::BitCast(du64, b01), w23 = hn::BitCast(du64, b23);
  const VF c = hn::Add(hn::BitCast(df, hn::InterleaveLower(du64, w01, w23)),
                       hn::BitCast(df, hn::InterleaveUpper(du64, w01, w23)));
  if constexpr (hn::MaxLanes(DF()) == 4) {
    const VF s = add != nullptr ? hn::Add(c, hn::LoadU(df, add)) : c;
    hn::StoreU(hn::Mul(s, hn::LoadU(df, f)), df, out);
  } else if constexpr (hn::MaxLanes(DF()) == 8) {
    const hn::Half<DF> d4;
    auto s = hn::Add(hn::LowerHalf(d4, c), hn::UpperHalf(d4, c));
    if (add != nullptr) s = hn::Add(s, hn::LoadU(d4, add));
    hn::StoreU(hn::Mul(s, hn::LoadU(d4, f)), d4, out);
  } else {
    const hn::Half<DF> d8;
    const hn::Half<decltype(d8)> d4;
    const auto h = hn::Add(hn::LowerHalf(d8, c), hn::UpperHalf(d8, c));
    auto s = hn::Add(hn::LowerHalf(d4, h), hn::UpperHalf(d4, h));
    if (add != nullptr) s = hn::Add(s, hn::LoadU(d4, add));
    hn::StoreU(hn::Mul(s, hn::LoadU(d4, f)), d4, out);
  }
#else
  (void)df, (void)a0, (void)a1, (void)a2, (void)a3, (void)f, (void)out, (void)add;
#endif
}

// scores[g][j - j0] = scale * q_g . k_j for the range's keys, four keys at a time where the
// target allows. The factor of each sum is the same for all keys where the format's scale is
// constant; formats with a scale per vector collect (vector scale x scale) per key in
// r.key_scales and multiply the score rows by it after the pass, with vectors (a factor per
// key inside the four-key loop would be written and re-read through memory, stalling on
// store forwarding). Either way each score is sum x (vector scale x scale), the same float.
// The int8 format (ScoreInt8) scores int8 queries: each score is (sum x dq) x (d_k x scale).
template <class R, int NG, uint32_t kD>
static void ScoreKeys(const RangeArgs& r) {
  const PagedAttentionArgs& a = *r.a;
  const PagedKvLayout& kv = a.kv;
  const DF df;
  const uint32_t D = kD != 0 ? kD : kv.head_dim;
  const uint32_t bs = kv.block_size;
  const int32_t len = r.j1 - r.j0;
  const uint32_t* table = a.block_table[r.t];
  constexpr bool kPerKey = HasVectorScale<R>();
  const float fixed = kPerKey ? 1.0f : ConstantFactor<R>() * a.scale;
  // The factor of each head's sums: the same for all, or an int8 query's scale.
  HWY_ALIGN float fh[NG][4];
  for (int g = 0; g < NG; ++g)
    for (int u = 0; u < 4; ++u) fh[g][u] = IntegerQuery<R>() ? r.dq[g] : fixed;
  float* const ks = r.key_scales;
  for (int32_t j = r.j0; j < r.j1;) {
    const int32_t b = j / bs;  // once per block; keys within it are addressed from its start
    const int32_t end = std::min<int32_t>(r.j1, (b + 1) * bs);
    const int32_t first = b * static_cast<int32_t>(bs);  // key j is at kb + (j - first) * bytes
    const uint8_t* kb = kv.k_head(table[b], a.layer, r.kvh);
    PrefetchCursor pf = BlockPrefetch(r, j, b);
    const uint32_t lines_per_step = pf.LinesPer((end - j + 3) / 4);
    if constexpr (kReduce4) {
      for (; j + 4 <= end; j += 4) {
        pf.Issue(lines_per_step);
        VF acc[4][NG];
        KVS_UNROLL
        for (int u = 0; u < 4; ++u) {
          const uint8_t* k = kb + int64_t{j + u - first} * kv.k_vector_bytes;
          DotKey<R, NG, kD>(df, k, r, D, acc[u]);
          if constexpr (kPerKey) ks[j + u - r.j0] = R::Scale(k, D) * a.scale;
        }
        KVS_UNROLL
        for (int g = 0; g < NG; ++g)
          Reduce4(df, acc[0][g], acc[1][g], acc[2][g], acc[3][g], fh[g],
                  r.scores + g * len + (j - r.j0));
      }
    }
    if constexpr (kReduce4) {
      // The last 1-3 keys of the block go through the same Reduce4 tree (padded with zeros),
      // so a key's score never depends on where block boundaries fall (block size invariance).
      if (j < end) {
        pf.Issue(lines_per_step);
        VF acc[4][NG];
        const int rest = end - j;
        for (int u = 0; u < 4; ++u) {
          if (u < rest) {
            const uint8_t* k = kb + int64_t{j + u - first} * kv.k_vector_bytes;
            DotKey<R, NG, kD>(df, k, r, D, acc[u]);
            if constexpr (kPerKey) ks[j + u - r.j0] = R::Scale(k, D) * a.scale;
          } else {
            KVS_UNROLL
            for (int g = 0; g < NG; ++g) acc[u][g] = hn::Zero(df);
          }
        }
        KVS_UNROLL
        for (int g = 0; g < NG; ++g) {
          HWY_ALIGN float out4[4];
          Reduce4(df, acc[0][g], acc[1][g], acc[2][g], acc[3][g], fh[g], out4);
          for (int u = 0; u < rest; ++u) r.scores[g * len + (j + u - r.j0)] = out4[u];
        }
        j = end;
      }
    } else {
      pf.Issue(~0u);
      for (; j < end; ++j) {
        VF acc[NG];
        const uint8_t* k = kb + int64_t{j - first} * kv.k_vector_bytes;
        DotKey<R, NG, kD>(df, k, r, D, acc);
        const float fk = KeyScale<R>(k, D) * a.scale;
        KVS_UNROLL
        for (int g = 0; g < NG; ++g)
          r.scores[g * len + (j - r.j0)] =
              hn::GetLane(hn::SumOfLanes(df, acc[g])) * (IntegerQuery<R>() ? r.dq[g] : 1.0f) * fk;
      }
    }
  }
  if constexpr (kPerKey && kReduce4) {
    const size_t L = hn::Lanes(df);
    for (int g = 0; g < NG; ++g) {
      float* row = r.scores + g * len;
      int32_t i = 0;
      for (; i + static_cast<int32_t>(L) <= len; i += L)
        hn::StoreU(hn::Mul(hn::LoadU(df, row + i), hn::LoadU(df, ks + i)), df, row + i);
      for (; i < len; ++i) row[i] *= ks[i];
    }
  }
}

// The common head dim 64 gets its own instantiation: with D known, the loops over a vector's
// chunks unroll completely. So does 256 (Gemma 3) for f16 keys, the default format: 3-4% of a
// Gemma 3 prefill, for one more instantiation per query-head count rather than one per format.
// (The sanitizer build does not instrument the kernels, so it no longer needs a smaller variant.)
template <class R, int NG>
static void ScoreKeysD(const RangeArgs& r) {
  if (r.a->kv.head_dim == 64) return ScoreKeys<R, NG, 64>(r);
  if constexpr (std::is_same_v<R, ReadF16>)
    if (r.a->kv.head_dim == 256) return ScoreKeys<R, NG, 256>(r);
  return ScoreKeys<R, NG, 0>(r);
}

// int2mix_chan64's third bits (quant/kv_channel_groups.h) for ScoreChannelRows: per head, the
// wide channels' 4 x (q x step) in their order, W of them (W a multiple of the lanes, `stride`
// floats from one head's to the next), and where a group's rows of third bits start.
struct WideChannelTerms {
  const float* w = nullptr;  // head g's terms at w + g x stride
  uint32_t W = 0, stride = 0;
  const uint8_t* group = nullptr;
};

// Keys [j, end) of one per-channel group, as rows of R (kv_readers-inl.h): each key one dot
// product of the heads' qs with its codes, the accumulators in registers, four keys at a time
// reduced together (attention_key_scores-inl.h); head g's score is (dot + add[g]) x factor[g].
// Returns the first key not scored. With the
// head dim known at compile time (kD, as ScoreKeys) the loop over a row's chunks unrolls.
// G: the format's tokens per group. kWide: each key's third bits (WideChannelTerms) go into the
// same accumulators, a lane per wide channel, before the reduction (W a multiple of the lanes,
// and those a multiple of 8; otherwise no key is scored here and the caller scores them all).
template <class R, int NG, uint32_t kD, bool kWide = false>
static int32_t ScoreChannelRows(const RangeArgs& r, const uint8_t* group, int32_t G,
                                const float* qs, const float* add, const float* factor, int32_t j,
                                int32_t end, PrefetchCursor& pf, uint32_t lines_per_step,
                                const WideChannelTerms& wide = {}) {
  const PagedAttentionArgs& a = *r.a;
  const uint32_t D = kD != 0 ? kD : a.kv.head_dim;
  const int32_t len = r.j1 - r.j0;
  const DF df;
  const size_t L = hn::Lanes(df);
  if constexpr (kWide) {  // a whole number of bytes of third bits per chunk of lanes
    if (wide.W % L != 0 || L % 8 != 0) return j;
  }
  if constexpr (kReduce4) {
    // score = (sum + add) x factor, four keys of a head at a time in the reduction's lanes.
    HWY_ALIGN float add4[NG][4], factor4[NG][4];
    for (int u = 0; u < 4; ++u)
      for (int g = 0; g < NG; ++g) {
        add4[g][u] = add[g];
        factor4[g][u] = factor[g];
      }
    for (; j + 4 <= end; j += 4) {
      pf.Issue(lines_per_step);
      const uint8_t* rows[4];
      KVS_UNROLL
      for (int u = 0; u < 4; ++u) rows[u] = R::Row(group, uint32_t((j + u) % G), D);
      VF acc[4][NG];
      KVS_UNROLL
      for (int u = 0; u < 4; ++u) KVS_UNROLL
      for (int g = 0; g < NG; ++g) acc[u][g] = hn::Zero(df);
      const auto chunk = [&](uint32_t e) HWY_ATTR {
        VF qv[NG];
        KVS_UNROLL
        for (int g = 0; g < NG; ++g) qv[g] = hn::LoadU(df, qs + g * D + e);
        KVS_UNROLL
        for (int u = 0; u < 4; ++u) {
          const VF x = R::Load(df, rows[u], e);
          KVS_UNROLL
          for (int g = 0; g < NG; ++g) acc[u][g] = hn::MulAdd(qv[g], x, acc[u][g]);
        }
      };
      if constexpr (kD != 0) {
        KVS_UNROLL
        for (uint32_t e = 0; e < kD; e += L) chunk(e);
      } else {
        for (uint32_t e = 0; e < D; e += L) chunk(e);
      }
      if constexpr (kWide) {
        // Lane i of a chunk of wide channels adds its term where its third bit is set. The four
        // keys' rows of third bits follow each other (they are in one group).
        const uint8_t* thirds = channel_group_wide_bits(wide.group, uint32_t(j % G), D);
        const uint32_t third_bytes = D / 32;
        for (uint32_t k = 0; k < wide.W; k += L) {
          VF wv[NG];
          KVS_UNROLL
          for (int g = 0; g < NG; ++g) wv[g] = hn::LoadU(df, wide.w + g * wide.stride + k);
          KVS_UNROLL
          for (int u = 0; u < 4; ++u) {
            // The chunk's L bits: lane i's bit i. A group's rows of third bits lie before its
            // layer's V in the block, so reading past the last one stays in the block.
            const auto set = hn::LoadMaskBits(df, thirds + u * third_bytes + k / 8);
            KVS_UNROLL
            for (int g = 0; g < NG; ++g)
              acc[u][g] = hn::IfThenElse(set, hn::Add(acc[u][g], wv[g]), acc[u][g]);
          }
        }
      }
      KVS_UNROLL
      for (int g = 0; g < NG; ++g)
        Reduce4(df, acc[0][g], acc[1][g], acc[2][g], acc[3][g], factor4[g],
                r.scores + g * len + (j - r.j0), add4[g]);
    }
  }
  for (; j < end; ++j) {
    const uint8_t* row = R::Row(group, uint32_t(j % G), D);
    VF acc[NG];
    KVS_UNROLL
    for (int g = 0; g < NG; ++g) acc[g] = hn::Zero(df);
    for (uint32_t e = 0; e < D; e += L) {
      const VF x = R::Load(df, row, e);
      KVS_UNROLL
      for (int g = 0; g < NG; ++g) acc[g] = hn::MulAdd(hn::LoadU(df, qs + g * D + e), x, acc[g]);
    }
    if constexpr (kWide) {  // as in the four-key loop, for one key
      const uint8_t* third = channel_group_wide_bits(wide.group, uint32_t(j % G), D);
      for (uint32_t k = 0; k < wide.W; k += L) {
        const auto set = hn::LoadMaskBits(df, third + k / 8);
        KVS_UNROLL
        for (int g = 0; g < NG; ++g)
          acc[g] = hn::IfThenElse(set, hn::Add(acc[g], hn::LoadU(df, wide.w + g * wide.stride + k)),
                                  acc[g]);
      }
    }
    for (int g = 0; g < NG; ++g)
      r.scores[g * len + (j - r.j0)] =
          (hn::GetLane(hn::SumOfLanes(df, acc[g])) + add[g]) * factor[g];
  }
  return j;
}

template <class R, int NG, bool kWide = false>
static int32_t ScoreChannelRowsD(const RangeArgs& r, const uint8_t* group, int32_t G,
                                 const float* qs, const float* add, const float* factor, int32_t j,
                                 int32_t end, PrefetchCursor& pf, uint32_t lines_per_step,
                                 const WideChannelTerms& wide = {}) {
  if (r.a->kv.head_dim == 64)
    return ScoreChannelRows<R, NG, 64, kWide>(r, group, G, qs, add, factor, j, end, pf,
                                              lines_per_step, wide);
  return ScoreChannelRows<R, NG, 0, kWide>(r, group, G, qs, add, factor, j, end, pf, lines_per_step,
                                           wide);
}

}  // namespace HWY_NAMESPACE
}  // namespace kvs
HWY_AFTER_NAMESPACE();

#endif  // KVS_KERNELS_ATTENTION_KEY_SCORES_INL_H_
