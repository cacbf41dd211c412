#include "kernels/paged_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/check.h"
#include "kernels/int8_key_dots.h"
#include "kernels/kv_vector.h"
#include "quant/hadamard.h"
#include "quant/kv_codecs.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/paged_attention.cpp"
#include <hwy/cache_control.h>
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

// After highway.h (per-target re-inclusion), hence its own include block.
#include <hwy/contrib/math/math-inl.h>

#include "kernels/kv_readers-inl.h"

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

// Regions to prefetch a few lines at a time, spread over a block's keys.
struct PrefetchCursor {
  const uint8_t* p[2] = {nullptr, nullptr};
  uint64_t left[2] = {0, 0};  // bytes
  int n = 0;
  void Add(const uint8_t* region, uint64_t bytes) {
    p[n] = region;
    left[n++] = bytes;
  }
  // Lines per call for the whole to go out in `steps` calls.
  uint32_t LinesPer(int32_t steps) const {
    const uint64_t lines = (left[0] + 63) / 64 + (left[1] + 63) / 64;
    return static_cast<uint32_t>((lines + std::max(1, steps) - 1) / std::max(1, steps));
  }
  HWY_INLINE void Issue(uint32_t lines) {
    for (int i = 0; i < n && lines > 0; ++i) {
      while (left[i] > 0 && lines > 0) {
        hwy::Prefetch(p[i]);
        p[i] += 64;
        left[i] = left[i] > 64 ? left[i] - 64 : 0;
        --lines;
      }
    }
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
  uint32_t head0;     // first query head of the batch
  int32_t j0, j1;     // key positions [j0, j1)
  const float* q;     // [NG][head_dim] queries of the batch (rotated for a rotated K format)
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

// One chunk of L elements of an ungrouped key (i) or one 32-element group of a grouped key
// (e0), for all NG query heads: the bodies of KeyDot's loop.
template <class R, int NG>
static HWY_INLINE void KeyChunk(DF df, const uint8_t* k, const float* q, uint32_t D, size_t i,
                                VF* acc) {
  if constexpr (!R::kGrouped) {
    const VF x = R::Load(df, k, i);
    KVS_UNROLL
    for (int g = 0; g < NG; ++g) acc[g] = hn::MulAdd(hn::LoadU(df, q + g * D + i), x, acc[g]);
  } else {
    const size_t L = hn::Lanes(df);
    const uint8_t* gp = k + (i / 32) * R::kGroupBytes;
    VF part[NG];
    KVS_UNROLL
    for (int g = 0; g < NG; ++g) part[g] = hn::Zero(df);
    KVS_UNROLL
    for (size_t e = 0; e < 32; e += L) {
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
  const size_t step = R::kGrouped ? 32 : hn::Lanes(df);
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

// Four horizontal sums at once: out[u] = sum of the lanes of a[u] times f[u]. Pairs of
// interleaves leave each 128-bit block holding (a0, a1, a2, a3) partial sums, then the blocks
// are folded: about 3 operations per sum instead of SumOfLanes' 8.
#if HWY_TARGET == HWY_SCALAR
constexpr bool kReduce4 = false;
#else
constexpr bool kReduce4 = hn::MaxLanes(DF()) >= 4 && hn::MaxLanes(DF()) <= 16;
#endif

static HWY_INLINE void Reduce4(DF df, VF a0, VF a1, VF a2, VF a3, const float* f, float* out) {
#if HWY_TARGET != HWY_SCALAR
  const hn::Repartition<uint64_t, DF> du64;
  const VF b01 = hn::Add(hn::InterleaveLower(df, a0, a1), hn::InterleaveUpper(df, a0, a1));
  const VF b23 = hn::Add(hn::InterleaveLower(df, a2, a3), hn::InterleaveUpper(df, a2, a3));
  const auto w01 = hn::BitCast(du64, b01), w23 = hn::BitCast(du64, b23);
  const VF c = hn::Add(hn::BitCast(df, hn::InterleaveLower(du64, w01, w23)),
                       hn::BitCast(df, hn::InterleaveUpper(du64, w01, w23)));
  if constexpr (hn::MaxLanes(DF()) == 4) {
    hn::StoreU(hn::Mul(c, hn::LoadU(df, f)), df, out);
  } else if constexpr (hn::MaxLanes(DF()) == 8) {
    const hn::Half<DF> d4;
    const auto s = hn::Add(hn::LowerHalf(d4, c), hn::UpperHalf(d4, c));
    hn::StoreU(hn::Mul(s, hn::LoadU(d4, f)), d4, out);
  } else {
    const hn::Half<DF> d8;
    const hn::Half<decltype(d8)> d4;
    const auto h = hn::Add(hn::LowerHalf(d8, c), hn::UpperHalf(d8, c));
    const auto s = hn::Add(hn::LowerHalf(d4, h), hn::UpperHalf(d4, h));
    hn::StoreU(hn::Mul(s, hn::LoadU(d4, f)), d4, out);
  }
#else
  (void)df, (void)a0, (void)a1, (void)a2, (void)a3, (void)f, (void)out;
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
// chunks unroll completely. (The sanitizer build does not instrument the kernels, so it no
// longer needs a smaller variant.)
template <class R, int NG>
static void ScoreKeysD(const RangeArgs& r) {
  if (r.a->kv.head_dim == 64) return ScoreKeys<R, NG, 64>(r);
  return ScoreKeys<R, NG, 0>(r);
}

// acc[g] += sum_j p[g][j] v_j for the NC chunks of L elements starting at chunk c0, over keys
// [k0, k1) of the range: V converted in registers once for all NG heads, the NG x NC
// accumulators held in registers across the keys.
template <class R, int NG, int NC>
static HWY_INLINE void AccumulateTile(const RangeArgs& r, float* out, size_t c0, int32_t k0,
                                      int32_t k1) {
  const PagedAttentionArgs& a = *r.a;
  const PagedKvLayout& kv = a.kv;
  const DF df;
  const size_t L = hn::Lanes(df);
  const uint32_t D = kv.head_dim;
  const uint32_t bs = kv.block_size;
  const int32_t len = r.j1 - r.j0;
  const uint32_t* table = a.block_table[r.t];
  VF acc[NG][NC];
  KVS_UNROLL
  for (int g = 0; g < NG; ++g) KVS_UNROLL
  for (int c = 0; c < NC; ++c) acc[g][c] = hn::LoadU(df, out + g * D + (c0 + c) * L);
  for (int32_t j = k0; j < k1;) {
    const int32_t b = j / bs;
    const int32_t end = std::min<int32_t>(k1, (b + 1) * bs);
    const int32_t first = b * static_cast<int32_t>(bs);
    const uint8_t* vb = kv.v_head(table[b], a.layer, r.kvh);
    for (; j < end; ++j) {
      const uint8_t* v = vb + int64_t{j - first} * kv.v_vector_bytes;
      const float* p = r.scores + (j - r.j0);
      VF w[NG];
      if constexpr (!R::kGrouped) {
        // The vector's scale is already in p (ScaleWeights).
        KVS_UNROLL
        for (int g = 0; g < NG; ++g) w[g] = hn::Set(df, p[g * len]);
        KVS_UNROLL
        for (int c = 0; c < NC; ++c) {
          const VF x = R::Load(df, v, (c0 + c) * L);
          KVS_UNROLL
          for (int g = 0; g < NG; ++g) acc[g][c] = hn::MulAdd(w[g], x, acc[g][c]);
        }
      } else {
        KVS_UNROLL
        for (int g = 0; g < NG; ++g) w[g] = hn::Set(df, p[g * len]);
        KVS_UNROLL
        for (int c = 0; c < NC; ++c) {
          const size_t e = (c0 + c) * L;
          const uint8_t* gp = v + (e / 32) * R::kGroupBytes;
          const VF x = hn::Mul(R::Load(df, gp, e % 32), hn::Set(df, R::Scale(gp)));
          KVS_UNROLL
          for (int g = 0; g < NG; ++g) acc[g][c] = hn::MulAdd(w[g], x, acc[g][c]);
        }
      }
    }
  }
  KVS_UNROLL
  for (int g = 0; g < NG; ++g) KVS_UNROLL
  for (int c = 0; c < NC; ++c) hn::StoreU(acc[g][c], df, out + g * D + (c0 + c) * L);
}

// Accumulator registers available for the V pass (the rest hold weights and converted V).
#if HWY_TARGET <= HWY_AVX3
constexpr int kAccRegs = 16;  // of 32
#else
constexpr int kAccRegs = 8;  // of 16
#endif

// p[g][j] *= scale of v_j, for ungrouped formats whose vectors carry a scale (or a constant
// factor): once per key here instead of once per key and head inside the tile loop, which
// then broadcasts the weight straight from memory. The products are the same floats.
template <class R, int NG>
static void ScaleWeights(const RangeArgs& r) {
  const PagedAttentionArgs& a = *r.a;
  const PagedKvLayout& kv = a.kv;
  const uint32_t D = kv.head_dim, bs = kv.block_size;
  const int32_t len = r.j1 - r.j0;
  const uint32_t* table = a.block_table[r.t];
  for (int32_t j = r.j0; j < r.j1;) {
    const int32_t b = j / bs;
    const int32_t end = std::min<int32_t>(r.j1, (b + 1) * bs);
    const int32_t first = b * static_cast<int32_t>(bs);
    const uint8_t* vb = kv.v_head(table[b], a.layer, r.kvh);
    for (; j < end; ++j) {
      const float s = R::Scale(vb + int64_t{j - first} * kv.v_vector_bytes, D);
      KVS_UNROLL
      for (int g = 0; g < NG; ++g) r.scores[g * len + (j - r.j0)] *= s;
    }
  }
}

template <class R, int NG>
static void AccumulateValues(const RangeArgs& r, float* out) {
  const DF df;
  const size_t L = hn::Lanes(df);
  const size_t chunks = r.a->kv.head_dim / L;
  if constexpr (!R::kGrouped) {
    if constexpr (R::kVectorScale || R::kFactor != 1.0f) ScaleWeights<R, NG>(r);
  }
  constexpr int kMaxNC = std::max(1, std::min(4, kAccRegs / NG));
  // Key tiles small enough that a tile's V stays in L1 while each chunk tile passes over it.
  constexpr int32_t kKeyTile = 128;
  for (int32_t k0 = r.j0; k0 < r.j1; k0 += kKeyTile) {
    const int32_t k1 = std::min(r.j1, k0 + kKeyTile);
    size_t c0 = 0;
    for (; c0 + kMaxNC <= chunks; c0 += kMaxNC) AccumulateTile<R, NG, kMaxNC>(r, out, c0, k0, k1);
    switch (chunks - c0) {
      case 0: break;
      case 1: AccumulateTile<R, NG, 1>(r, out, c0, k0, k1); break;
      case 2: AccumulateTile<R, NG, std::min(2, kMaxNC)>(r, out, c0, k0, k1); break;
      default: AccumulateTile<R, NG, std::min(3, kMaxNC)>(r, out, c0, k0, k1); break;
    }
  }
}

// Fallback for head dims the readers cannot tile (D % Lanes != 0, or a grouped format on a
// target with more than 16 f32 lanes): scalar decode of each vector, plain loops.
template <int NG>
static void ScoreKeysScalar(const RangeArgs& r, float* buf) {
  const PagedAttentionArgs& a = *r.a;
  const PagedKvLayout& kv = a.kv;
  const uint32_t D = kv.head_dim, bs = kv.block_size;
  const int32_t len = r.j1 - r.j0;
  const float* q = a.q + (r.t * a.num_heads + r.head0) * D;
  for (int32_t j = r.j0; j < r.j1; ++j) {
    const uint8_t* k =
        kv.k_head(a.block_table[r.t][j / bs], a.layer, r.kvh) + (j % bs) * kv.k_vector_bytes;
    if (kv.k_dtype == KvDtype::kInt8) {  // the exact integer scores of every other path
      const float ks = load_f16_scale(k + D) * a.scale;
      for (int g = 0; g < NG; ++g) {
        int32_t sum = 0;
        for (uint32_t i = 0; i < D; ++i)
          sum += int32_t{r.q8[g * D + i]} * static_cast<int8_t>(k[i]);
        r.scores[g * len + (j - r.j0)] = static_cast<float>(sum) * r.dq[g] * ks;
      }
      continue;
    }
    kv_vector_to_f32(kv.k_dtype, k, D, buf, 0);
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

static bool readers_fit(KvDtype dtype, uint32_t D) {
  const DF df;
  const size_t L = hn::Lanes(df);
  if (D % L != 0) return false;
  const uint32_t group = kv_dtype_info(dtype).group_elems;
  return group == 0 || (L <= 16 && 32 % L == 0);
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
    const int8_key_dots::Prefetch pf{.p = {plan.p[0], plan.p[1]},
                                     .bytes = {plan.left[0], plan.left[1]}};
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
  if (!readers_fit(dtype, r.a->kv.head_dim)) return ScoreKeysScalar<NG>(r, buf);
  switch (dtype) {
    case KvDtype::kF32: return ScoreKeysD<ReadF32, NG>(r);
    case KvDtype::kF16: return ScoreKeysD<ReadF16, NG>(r);
    case KvDtype::kBF16: return ScoreKeysD<ReadBF16, NG>(r);
    case KvDtype::kFp8E4M3: return ScoreKeysD<ReadFp8E4M3, NG>(r);
    case KvDtype::kFp8E5M2: return ScoreKeysD<ReadFp8E5M2, NG>(r);
    case KvDtype::kFp8E4M3Dyn: return ScoreKeysD<ReadFp8E4M3Dyn, NG>(r);
    case KvDtype::kInt8:  // int8 queries (kernels/int8_key_dots.h)
      if (r.int8_dots != nullptr) return ScoreKeysVnni<NG>(r, *r.int8_dots);
      if (int8_scores_fit(r.a->kv.head_dim)) return ScoreKeysD<ScoreInt8, NG>(r);
      return ScoreKeysScalar<NG>(r, buf);
    case KvDtype::kInt4:
    case KvDtype::kQ4_0:
    case KvDtype::kInt4Had: return ScoreKeysD<ReadQ4, NG>(r);
    case KvDtype::kQ8_0: return ScoreKeysD<ReadQ8, NG>(r);
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
    case KvDtype::kInt8: return AccumulateValues<ReadInt8, NG>(r, out);
    case KvDtype::kInt4:
    case KvDtype::kQ4_0:
    case KvDtype::kInt4Had: return AccumulateValues<ReadQ4, NG>(r, out);
    case KvDtype::kQ8_0: return AccumulateValues<ReadQ8, NG>(r, out);
  }
}

// In place: x[i] = exp(x[i] - m); returns the sum.
static float ExpSubAndSum(float* x, int32_t n, float m) {
  const DF df;
  const size_t L = hn::Lanes(df);
  const VF vm = hn::Set(df, m);
  VF sum = hn::Zero(df);
  int32_t i = 0;
  for (; i + static_cast<int32_t>(L) <= n; i += L) {
    const VF e = hn::Exp(df, hn::Sub(hn::LoadU(df, x + i), vm));
    hn::StoreU(e, df, x + i);
    sum = hn::Add(sum, e);
  }
  float s = hn::GetLane(hn::SumOfLanes(df, sum));
  for (; i < n; ++i) s += (x[i] = std::exp(x[i] - m));
  return s;
}

static float MaxOf(const float* x, int32_t n) {
  const DF df;
  const size_t L = hn::Lanes(df);
  VF m = hn::Set(df, -INFINITY);
  int32_t i = 0;
  for (; i + static_cast<int32_t>(L) <= n; i += L) m = hn::Max(m, hn::LoadU(df, x + i));
  float r = hn::GetLane(hn::MaxOfLanes(df, m));
  for (; i < n; ++i) r = std::max(r, x[i]);
  return r;
}

// One range of keys for NG query heads -> Partial (acc zeroed here).
template <int NG>
static void AttendRange(const RangeArgs& r, const Partial& out, float* buf) {
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
  ScoreKeysFor<NG>(kv.k_dtype, r, buf);
  for (int g = 0; g < NG; ++g) {
    float* sc = r.scores + g * len;
    out.m[g] = MaxOf(sc, len);
    out.l[g] = ExpSubAndSum(sc, len, out.m[g]);
  }
  AccumulateValuesFor<NG>(kv.v_dtype, r, out.acc, buf);
}

static void AttendRangeAnyNG(int ng, const RangeArgs& r, const Partial& out, float* buf) {
  switch (ng) {
    case 1: return AttendRange<1>(r, out, buf);
    case 2: return AttendRange<2>(r, out, buf);
    case 3: return AttendRange<3>(r, out, buf);
    default: return AttendRange<4>(r, out, buf);
  }
}

struct Scratch {
  std::vector<float> scores;      // [NG][range]
  std::vector<float> key_scales;  // [range]
  std::vector<float> buf;         // [head_dim] for the scalar fallback
  std::vector<float> part;        // [NG][D + 2] when writing straight to the output
  std::vector<float> qrot;        // [group][D]: the group's queries rotated (rotated K formats)
};

// int8 K: every query head of the call quantized once (kernels/int8_key_dots.h), before the
// items that share it (one per kv head and segment of its token).
struct QueriesInt8 {
  std::vector<int8_t> q8;     // [T][H][D]
  std::vector<int16_t> q16;   // [T][H][D]
  std::vector<int32_t> qsum;  // [T][H]
  std::vector<float> dq;      // [T][H]

  // with_q16: also the int16 copy the Highway path reads (the VNNI kernels read q8).
  void quantize(const PagedAttentionArgs& a, ThreadPool& pool, bool with_q16) {
    const uint32_t D = a.kv.head_dim;
    const size_t heads = static_cast<size_t>(a.num_tokens) * a.num_heads;
    if (q8.size() < heads * D) {
      q8.resize(heads * D);
      qsum.resize(heads);
      dq.resize(heads);
    }
    if (with_q16 && q16.size() < heads * D) q16.resize(heads * D);
    auto run = [&](size_t begin, size_t end, int) {
      for (size_t h = begin; h < end; ++h) {
        dq[h] = quantize_query_int8(a.q + h * D, D, q8.data() + h * D, &qsum[h]);
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
// A token's context is always cut into segments of kSegment keys, attended separately and merged
// in order with the usual max/sum rescaling. The cut depends only on the token's own context
// length, never on the batch or the thread count, so a token's output is the same bit for bit
// whether it runs alone, in a batch, in a prefill chunk of any size, or on any number of threads
// (the engine's "N parallel sequences = N separate runs" and chunking invariance rest on it).
// Segments are also the unit of parallelism, which keeps every thread busy in decode.
constexpr int32_t kSegment = 256;

void PagedAttention(const PagedAttentionArgs& a, ThreadPool& pool) {
  const PagedKvLayout& kv = a.kv;
  const uint32_t D = kv.head_dim;
  const uint32_t group = a.num_heads / kv.kv_heads;
  const int64_t T = a.num_tokens;
  if (T == 0 || kv.kv_heads == 0) return;
  // first_item[t]: index of token t's first (kv head, segment) item; segments(t) per kv head.
  thread_local std::vector<int64_t> first_item;
  first_item.resize(static_cast<size_t>(T) + 1);
  first_item[0] = 0;
  bool any_split = false;
  // Keys [first_key(t), context_len[t]): all of them, or the last `window` with a sliding
  // window. Segments start at the first key, so they still depend on the token alone.
  auto first_key = [&](int64_t t) {
    return a.window == 0 ? 0 : std::max<int32_t>(0, a.context_len[t] - int32_t(a.window));
  };
  auto segments = [&](int64_t t) {
    return std::max<int32_t>(1, (a.context_len[t] - first_key(t) + kSegment - 1) / kSegment);
  };
  for (int64_t t = 0; t < T; ++t) {
    const int32_t ns = segments(t);
    any_split |= ns > 1;
    first_item[t + 1] = first_item[t] + int64_t{kv.kv_heads} * ns;
  }
  const int64_t items = first_item[T];
  // Rotated formats are read in the rotated space (q rotated, output rotated back) when the
  // readers handle them; the scalar fallback decodes to the original space instead.
  const bool k_rotated = kv_dtype_rotated(kv.k_dtype) && readers_fit(kv.k_dtype, D);
  const bool v_rotated = kv_dtype_rotated(kv.v_dtype) && readers_fit(kv.v_dtype, D);
  const bool k_int8 = kv.k_dtype == KvDtype::kInt8;  // scored against int8 queries
  // The VNNI kernels score int8 keys where the CPU has them and the head dim fits their vectors.
  const int8_key_dots::Kernels* int8_dots = k_int8 ? int8_key_dots::active() : nullptr;
  if (int8_dots != nullptr && (!readers_fit(kv.k_dtype, D) || D % int8_dots->chunk != 0))
    int8_dots = nullptr;
  thread_local QueriesInt8 queries_int8;
  if (k_int8) queries_int8.quantize(a, pool, int8_dots == nullptr);
  const QueriesInt8& qi = queries_int8;  // the caller's (a thread_local is per worker)
  const size_t part_stride = size_t{group} * (D + 2);  // acc [group][D], m [group], l [group]
  thread_local std::vector<float> partials;
  if (any_split && partials.size() < static_cast<size_t>(items) * part_stride)
    partials.resize(static_cast<size_t>(items) * part_stride);
  float* const partials_data = partials.data();
  const int64_t* const first = first_item.data();
  pool.parallel_for(static_cast<size_t>(items), 1, [&](size_t begin, size_t end, int) {
    thread_local Scratch s;
    if (s.buf.size() < D) s.buf.resize(D);
    for (size_t it = begin; it < end; ++it) {
      const int64_t t =
          std::upper_bound(first, first + T + 1, static_cast<int64_t>(it)) - first - 1;
      const int32_t ns = segments(t);
      const int64_t local = static_cast<int64_t>(it) - first[t];
      // Segment-major: the kv heads of one segment are neighbours in memory (kv_block_storage
      // keeps a block's heads of one layer together) and follow each other here, so the
      // hardware prefetcher runs on from one head's region into the next.
      const uint32_t kvh = static_cast<uint32_t>(local % kv.kv_heads);
      const int32_t seg = static_cast<int32_t>(local / kv.kv_heads);
      const int32_t n = a.context_len[t];
      const int32_t j0 = std::min(n, first_key(t) + seg * kSegment),
                    j1 = std::min(n, j0 + kSegment);
      const size_t need = size_t(kMaxNG) * std::max(1, j1 - j0);
      if (s.scores.size() < need) s.scores.resize(need);
      if (s.key_scales.size() < size_t(std::max(1, j1 - j0))) s.key_scales.resize(j1 - j0);
      float* base;
      if (ns > 1) {
        base = partials_data + it * part_stride;
      } else {
        if (s.part.size() < part_stride) s.part.resize(part_stride);
        base = s.part.data();
      }
      const size_t head0 = static_cast<size_t>(t) * a.num_heads + size_t{kvh} * group;
      const float* q = a.q + head0 * D;
      if (k_rotated) {  // H q for all heads of the group, once per item
        if (s.qrot.size() < size_t{group} * D) s.qrot.resize(size_t{group} * D);
        std::memcpy(s.qrot.data(), q, sizeof(float) * group * D);
        for (uint32_t g = 0; g < group; ++g) hadamard_inplace(s.qrot.data() + g * D, D);
        q = s.qrot.data();
      }
      for (uint32_t g0 = 0; g0 < group; g0 += kMaxNG) {
        const int ng = static_cast<int>(std::min<uint32_t>(kMaxNG, group - g0));
        const RangeArgs r{
            .a = &a,
            .t = t,
            .kvh = kvh,
            .head0 = kvh * group + g0,
            .j0 = j0,
            .j1 = j1,
            .q = q + g0 * D,
            .scores = s.scores.data(),
            .key_scales = s.key_scales.data(),
            .q8 = k_int8 ? qi.q8.data() + (head0 + g0) * D : nullptr,
            .q16 = k_int8 && int8_dots == nullptr ? qi.q16.data() + (head0 + g0) * D : nullptr,
            .qsum = k_int8 ? qi.qsum.data() + head0 + g0 : nullptr,
            .dq = k_int8 ? qi.dq.data() + head0 + g0 : nullptr,
            .int8_dots = int8_dots};
        const Partial p{
            .acc = base + g0 * D, .m = base + group * D + g0, .l = base + group * (D + 1) + g0};
        AttendRangeAnyNG(ng, r, p, s.buf.data());
      }
      if (ns == 1) {
        for (uint32_t g = 0; g < group; ++g) {
          float* o = a.out + (t * a.num_heads + kvh * group + g) * D;
          const float* acc = base + g * D;
          const float inv = 1.0f / base[group * (D + 1) + g];
          for (uint32_t i = 0; i < D; ++i) o[i] = acc[i] * inv;
          if (v_rotated) hadamard_inplace(o, D);  // H (sum p H v) = sum p v
        }
      }
    }
  });
  if (!any_split) return;
  // Merge the segments of split tokens, in segment order:
  // out = sum_s e^(m_s - M) acc_s / sum_s e^(m_s - M) l_s.
  for (int64_t t = 0; t < T; ++t) {
    const int32_t ns = segments(t);
    if (ns == 1) continue;
    for (uint32_t kvh = 0; kvh < kv.kv_heads; ++kvh) {
      const float* parts = partials_data + (first[t] + kvh) * part_stride;
      for (uint32_t g = 0; g < group; ++g) {
        float M = -INFINITY;
        const size_t seg_stride = size_t{kv.kv_heads} * part_stride;  // segment-major items
        for (int32_t sp = 0; sp < ns; ++sp) M = std::max(M, parts[sp * seg_stride + group * D + g]);
        float* o = a.out + (t * a.num_heads + kvh * group + g) * D;
        std::memset(o, 0, D * sizeof(float));
        float l = 0;
        for (int32_t sp = 0; sp < ns; ++sp) {
          const float* b = parts + sp * seg_stride;
          const float ms = b[group * D + g];
          if (ms == -INFINITY) continue;
          const float w = std::exp(ms - M);
          l += w * b[group * (D + 1) + g];
          for (uint32_t i = 0; i < D; ++i) o[i] += w * b[g * D + i];
        }
        const float inv = 1.0f / l;
        for (uint32_t i = 0; i < D; ++i) o[i] *= inv;
        if (v_rotated) hadamard_inplace(o, D);
      }
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace kvs
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kvs {
HWY_EXPORT(PagedAttention);

void paged_attention(const PagedAttentionArgs& args, ThreadPool& pool) {
  KVS_CHECK(args.kv.kv_heads > 0 && args.num_heads % args.kv.kv_heads == 0);
  HWY_DYNAMIC_DISPATCH(PagedAttention)(args, pool);
}

}  // namespace kvs
#endif
