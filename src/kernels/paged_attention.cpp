#include "kernels/paged_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/check.h"
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

HWY_BEFORE_NAMESPACE();
namespace kvs {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

// ---- Format readers ---------------------------------------------------------------------------
// Each reader converts Lanes(df) consecutive elements of one stored K/V vector to f32 lanes in
// registers, WITHOUT the vector's (or group's) scale; Scale() gives the factor that turns those
// lanes into values. The kernel applies the scale once per vector (per group for grouped
// formats) to the dot product or to the softmax weight, never per element.
//
// Ungrouped readers: Load(df, vec, i) for elements [i, i + L); Scale(vec, D).
// Grouped readers (32 elements per group): Load(df, group, e) for elements [e, e + L) of the
// group, e a multiple of L < 32 (needs L <= 16); Scale(group).

// Complete unrolling of the loops over query heads and chunks, so that the accumulator arrays
// live in registers (GCC -O2 would otherwise keep them on the stack).
#define KVS_UNROLL _Pragma("GCC unroll 16")

// Prefetches the `bytes` of one (block, head) region of K or V: the blocks of a sequence are
// scattered over the pool, so the hardware prefetcher cannot see the next one coming.
static HWY_INLINE void PrefetchRegion(const uint8_t* p, uint64_t bytes) {
  for (uint64_t o = 0; o < bytes; o += 64) hwy::Prefetch(p + o);
}

// One f16 scale as f32, converted by the hardware where it can (F16C), not bit by bit.
static HWY_INLINE float F16At(const uint8_t* p) {
  const hn::CappedTag<float, 1> d1;
  const hn::Rebind<hwy::float16_t, decltype(d1)> dh1;
  return hn::GetLane(hn::PromoteTo(d1, hn::LoadU(dh1, reinterpret_cast<const hwy::float16_t*>(p))));
}

struct ReadF32 {
  static constexpr bool kGrouped = false;
  static HWY_INLINE VF Load(DF df, const uint8_t* v, size_t i) {
    return hn::LoadU(df, reinterpret_cast<const float*>(v) + i);
  }
  static HWY_INLINE float Scale(const uint8_t*, uint32_t) { return 1.0f; }
};

struct ReadF16 {
  static constexpr bool kGrouped = false;
  static HWY_INLINE VF Load(DF df, const uint8_t* v, size_t i) {
    const hn::Rebind<hwy::float16_t, DF> dh;
    return hn::PromoteTo(df, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(v) + i));
  }
  static HWY_INLINE float Scale(const uint8_t*, uint32_t) { return 1.0f; }
};

struct ReadBF16 {
  static constexpr bool kGrouped = false;
  static HWY_INLINE VF Load(DF df, const uint8_t* v, size_t i) {
    const hn::Rebind<hwy::bfloat16_t, DF> db;
    return hn::PromoteTo(df, hn::LoadU(db, reinterpret_cast<const hwy::bfloat16_t*>(v) + i));
  }
  static HWY_INLINE float Scale(const uint8_t*, uint32_t) { return 1.0f; }
};

// fp8 bytes widened to f16 bit patterns, then converted by the f16 path (exact for every code,
// subnormals included, with no f32 denormal ever formed).
//   e5m2: the byte is the top half of an f16.
//   e4m3: S.EEEE.MMM -> S.0EEEE.MMM0000000 is the f16 of value * 2^-8 (bias 15 vs 7), so the
//         scale carries the 2^8.
static HWY_INLINE VF Fp8BitsToF32(DF df, hn::Vec<hn::Rebind<uint16_t, DF>> bits) {
  const hn::Rebind<hwy::float16_t, DF> dh;
  return hn::PromoteTo(df, hn::BitCast(dh, bits));
}
static HWY_INLINE hn::Vec<hn::Rebind<uint16_t, DF>> LoadBytesAsU16(DF, const uint8_t* p) {
  const hn::Rebind<uint16_t, DF> du16;
  const hn::Rebind<uint8_t, DF> du8;
  return hn::PromoteTo(du16, hn::LoadU(du8, p));
}
static HWY_INLINE VF LoadE4M3(DF df, const uint8_t* p) {
  const hn::Rebind<uint16_t, DF> du16;
  const auto b = LoadBytesAsU16(df, p);
  const auto bits = hn::Or(hn::ShiftLeft<8>(hn::And(b, hn::Set(du16, 0x80))),
                           hn::ShiftLeft<7>(hn::And(b, hn::Set(du16, 0x7F))));
  return Fp8BitsToF32(df, bits);
}
constexpr float kE4M3Fix = 256.0f;

struct ReadFp8E4M3 {
  static constexpr bool kGrouped = false;
  static HWY_INLINE VF Load(DF df, const uint8_t* v, size_t i) { return LoadE4M3(df, v + i); }
  static HWY_INLINE float Scale(const uint8_t*, uint32_t) { return kE4M3Fix; }
};

struct ReadFp8E5M2 {
  static constexpr bool kGrouped = false;
  static HWY_INLINE VF Load(DF df, const uint8_t* v, size_t i) {
    return Fp8BitsToF32(df, hn::ShiftLeft<8>(LoadBytesAsU16(df, v + i)));
  }
  static HWY_INLINE float Scale(const uint8_t*, uint32_t) { return 1.0f; }
};

struct ReadFp8E4M3Dyn {
  static constexpr bool kGrouped = false;
  static HWY_INLINE VF Load(DF df, const uint8_t* v, size_t i) { return LoadE4M3(df, v + i); }
  static HWY_INLINE float Scale(const uint8_t* v, uint32_t D) { return kE4M3Fix * F16At(v + D); }
};

struct ReadInt8 {
  static constexpr bool kGrouped = false;
  static HWY_INLINE VF Load(DF df, const uint8_t* v, size_t i) {
    const hn::Rebind<int32_t, DF> di32;
    const hn::Rebind<int8_t, DF> di8;
    return hn::ConvertTo(
        df, hn::PromoteTo(di32, hn::LoadU(di8, reinterpret_cast<const int8_t*>(v) + i)));
  }
  static HWY_INLINE float Scale(const uint8_t* v, uint32_t D) { return F16At(v + D); }
};

struct ReadQ4 {  // int4 and q4_0
  static constexpr bool kGrouped = true;
  static constexpr uint32_t kGroupBytes = GroupQ4Traits::kGroupBytes;
  static HWY_INLINE VF Load(DF df, const uint8_t* g, size_t e) {
    const hn::Rebind<uint32_t, DF> du32;
    const hn::Rebind<int32_t, DF> di32;
    const hn::Rebind<uint8_t, DF> du8;
    const auto w = hn::PromoteTo(du32, hn::LoadU(du8, g + 2 + (e & 15)));
    const auto nib = e < 16 ? hn::And(w, hn::Set(du32, 0x0F)) : hn::ShiftRight<4>(w);
    return hn::ConvertTo(df, hn::Sub(hn::BitCast(di32, nib), hn::Set(di32, 8)));
  }
  static HWY_INLINE float Scale(const uint8_t* g) { return F16At(g); }
};

struct ReadQ8 {  // q8_0
  static constexpr bool kGrouped = true;
  static constexpr uint32_t kGroupBytes = GroupQ8Traits::kGroupBytes;
  static HWY_INLINE VF Load(DF df, const uint8_t* g, size_t e) {
    const hn::Rebind<int32_t, DF> di32;
    const hn::Rebind<int8_t, DF> di8;
    return hn::ConvertTo(
        df, hn::PromoteTo(di32, hn::LoadU(di8, reinterpret_cast<const int8_t*>(g + 2) + e)));
  }
  static HWY_INLINE float Scale(const uint8_t* g) { return F16At(g); }
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
  uint32_t head0;  // first query head of the batch
  int32_t j0, j1;  // key positions [j0, j1)
  const float* q;  // [NG][head_dim] queries of the batch (rotated for a rotated K format)
  float* scores;   // [NG][j1 - j0] scratch
};

// acc[g] = q_g . k lane-wise partial sums (unscaled) for one key; returns the key's scale (1
// for grouped formats, whose group scales are applied inside). K is converted once for all NG
// query heads.
template <class R, int NG>
static HWY_INLINE float KeyDot(DF df, const uint8_t* k, const float* q, uint32_t D, VF* acc) {
  const size_t L = hn::Lanes(df);
  KVS_UNROLL
  for (int g = 0; g < NG; ++g) acc[g] = hn::Zero(df);
  if constexpr (!R::kGrouped) {
    for (size_t i = 0; i < D; i += L) {
      const VF x = R::Load(df, k, i);
      KVS_UNROLL
      for (int g = 0; g < NG; ++g) acc[g] = hn::MulAdd(hn::LoadU(df, q + g * D + i), x, acc[g]);
    }
    return R::Scale(k, D);
  } else {
    for (uint32_t e0 = 0; e0 < D; e0 += 32) {
      const uint8_t* gp = k + (e0 / 32) * R::kGroupBytes;
      VF part[NG];
      KVS_UNROLL
      for (int g = 0; g < NG; ++g) part[g] = hn::Zero(df);
      KVS_UNROLL
      for (size_t e = 0; e < 32; e += L) {
        const VF x = R::Load(df, gp, e);
        KVS_UNROLL
        for (int g = 0; g < NG; ++g)
          part[g] = hn::MulAdd(hn::LoadU(df, q + g * D + e0 + e), x, part[g]);
      }
      const VF gs = hn::Set(df, R::Scale(gp));
      KVS_UNROLL
      for (int g = 0; g < NG; ++g) acc[g] = hn::MulAdd(part[g], gs, acc[g]);
    }
    return 1.0f;
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
// target allows.
template <class R, int NG>
static void ScoreKeys(const RangeArgs& r) {
  const PagedAttentionArgs& a = *r.a;
  const PagedKvLayout& kv = a.kv;
  const DF df;
  const uint32_t D = kv.head_dim;
  const uint32_t bs = kv.block_size;
  const int32_t len = r.j1 - r.j0;
  const float* q = r.q;
  const uint32_t* table = a.block_table[r.t];
  for (int32_t j = r.j0; j < r.j1;) {
    const uint8_t* kb = kv.k_head(table[j / bs], a.layer, r.kvh);
    const int32_t end = std::min<int32_t>(r.j1, (j / bs + 1) * bs);
    if (end < r.j1)
      PrefetchRegion(kv.k_head(table[j / bs + 1], a.layer, r.kvh),
                     uint64_t{bs} * kv.k_vector_bytes);
    if constexpr (kReduce4) {
      for (; j + 4 <= end; j += 4) {
        VF acc[4][NG];
        HWY_ALIGN float f[4];
        KVS_UNROLL
        for (int u = 0; u < 4; ++u)
          f[u] = KeyDot<R, NG>(df, kb + ((j + u) % bs) * kv.k_vector_bytes, q, D, acc[u]) * a.scale;
        KVS_UNROLL
        for (int g = 0; g < NG; ++g)
          Reduce4(df, acc[0][g], acc[1][g], acc[2][g], acc[3][g], f,
                  r.scores + g * len + (j - r.j0));
      }
    }
    if constexpr (kReduce4) {
      // The last 1-3 keys of the block go through the same Reduce4 tree (padded with zeros),
      // so a key's score never depends on where block boundaries fall (block size invariance).
      if (j < end) {
        VF acc[4][NG];
        HWY_ALIGN float f[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        const int rest = end - j;
        for (int u = 0; u < 4; ++u) {
          if (u < rest) {
            f[u] =
                KeyDot<R, NG>(df, kb + ((j + u) % bs) * kv.k_vector_bytes, q, D, acc[u]) * a.scale;
          } else {
            KVS_UNROLL
            for (int g = 0; g < NG; ++g) acc[u][g] = hn::Zero(df);
          }
        }
        KVS_UNROLL
        for (int g = 0; g < NG; ++g) {
          HWY_ALIGN float out4[4];
          Reduce4(df, acc[0][g], acc[1][g], acc[2][g], acc[3][g], f, out4);
          for (int u = 0; u < rest; ++u) r.scores[g * len + (j + u - r.j0)] = out4[u];
        }
        j = end;
      }
    } else {
      for (; j < end; ++j) {
        VF acc[NG];
        const float f = KeyDot<R, NG>(df, kb + (j % bs) * kv.k_vector_bytes, q, D, acc) * a.scale;
        KVS_UNROLL
        for (int g = 0; g < NG; ++g)
          r.scores[g * len + (j - r.j0)] = hn::GetLane(hn::SumOfLanes(df, acc[g])) * f;
      }
    }
  }
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
    const uint8_t* vb = kv.v_head(table[j / bs], a.layer, r.kvh);
    const int32_t end = std::min<int32_t>(k1, (j / bs + 1) * bs);
    if (end < r.j1)
      PrefetchRegion(kv.v_head(table[j / bs + 1], a.layer, r.kvh),
                     uint64_t{bs} * kv.v_vector_bytes);
    for (; j < end; ++j) {
      const uint8_t* v = vb + (j % bs) * kv.v_vector_bytes;
      const float* p = r.scores + (j - r.j0);
      VF w[NG];
      if constexpr (!R::kGrouped) {
        const float s = R::Scale(v, D);
        KVS_UNROLL
        for (int g = 0; g < NG; ++g) w[g] = hn::Set(df, p[g * len] * s);
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

template <class R, int NG>
static void AccumulateValues(const RangeArgs& r, float* out) {
  const DF df;
  const size_t L = hn::Lanes(df);
  const size_t chunks = r.a->kv.head_dim / L;
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
    kv_vector_to_f32(
        kv.k_dtype,
        kv.k_head(a.block_table[r.t][j / bs], a.layer, r.kvh) + (j % bs) * kv.k_vector_bytes, D,
        buf, 0);
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

template <int NG>
static void ScoreKeysFor(KvDtype dtype, const RangeArgs& r, float* buf) {
  if (!readers_fit(dtype, r.a->kv.head_dim)) return ScoreKeysScalar<NG>(r, buf);
  switch (dtype) {
    case KvDtype::kF32: return ScoreKeys<ReadF32, NG>(r);
    case KvDtype::kF16: return ScoreKeys<ReadF16, NG>(r);
    case KvDtype::kBF16: return ScoreKeys<ReadBF16, NG>(r);
    case KvDtype::kFp8E4M3: return ScoreKeys<ReadFp8E4M3, NG>(r);
    case KvDtype::kFp8E5M2: return ScoreKeys<ReadFp8E5M2, NG>(r);
    case KvDtype::kFp8E4M3Dyn: return ScoreKeys<ReadFp8E4M3Dyn, NG>(r);
    case KvDtype::kInt8: return ScoreKeys<ReadInt8, NG>(r);
    case KvDtype::kInt4:
    case KvDtype::kQ4_0:
    case KvDtype::kInt4Had: return ScoreKeys<ReadQ4, NG>(r);
    case KvDtype::kQ8_0: return ScoreKeys<ReadQ8, NG>(r);
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
  std::vector<float> scores;  // [NG][range]
  std::vector<float> buf;     // [head_dim] for the scalar fallback
  std::vector<float> part;    // [NG][D + 2] when writing straight to the output
  std::vector<float> qrot;    // [group][D]: the group's queries rotated (rotated K formats)
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
  auto segments = [&](int64_t t) {
    return std::max<int32_t>(1, (a.context_len[t] + kSegment - 1) / kSegment);
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
      const uint32_t kvh = static_cast<uint32_t>(local / ns);
      const int32_t seg = static_cast<int32_t>(local % ns);
      const int32_t n = a.context_len[t];
      const int32_t j0 = std::min(n, seg * kSegment), j1 = std::min(n, j0 + kSegment);
      const size_t need = size_t(kMaxNG) * std::max(1, j1 - j0);
      if (s.scores.size() < need) s.scores.resize(need);
      float* base;
      if (ns > 1) {
        base = partials_data + it * part_stride;
      } else {
        if (s.part.size() < part_stride) s.part.resize(part_stride);
        base = s.part.data();
      }
      const float* q = a.q + (t * a.num_heads + kvh * group) * D;
      if (k_rotated) {  // H q for all heads of the group, once per item
        if (s.qrot.size() < size_t{group} * D) s.qrot.resize(size_t{group} * D);
        std::memcpy(s.qrot.data(), q, sizeof(float) * group * D);
        for (uint32_t g = 0; g < group; ++g) hadamard_inplace(s.qrot.data() + g * D, D);
        q = s.qrot.data();
      }
      for (uint32_t g0 = 0; g0 < group; g0 += kMaxNG) {
        const int ng = static_cast<int>(std::min<uint32_t>(kMaxNG, group - g0));
        const RangeArgs r{.a = &a,
                          .t = t,
                          .kvh = kvh,
                          .head0 = kvh * group + g0,
                          .j0 = j0,
                          .j1 = j1,
                          .q = q + g0 * D,
                          .scores = s.scores.data()};
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
      const float* parts = partials_data + (first[t] + int64_t{kvh} * ns) * part_stride;
      for (uint32_t g = 0; g < group; ++g) {
        float M = -INFINITY;
        for (int32_t sp = 0; sp < ns; ++sp)
          M = std::max(M, parts[sp * part_stride + group * D + g]);
        float* o = a.out + (t * a.num_heads + kvh * group + g) * D;
        std::memset(o, 0, D * sizeof(float));
        float l = 0;
        for (int32_t sp = 0; sp < ns; ++sp) {
          const float* b = parts + sp * part_stride;
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
  KVS_CHECK(kv_dtype_supported_by_kernels(args.kv.k_dtype) &&
            kv_dtype_supported_by_kernels(args.kv.v_dtype));
  HWY_DYNAMIC_DISPATCH(PagedAttention)(args, pool);
}

void paged_attention_reference(const PagedAttentionArgs& a) {
  const PagedKvLayout& kv = a.kv;
  const uint32_t D = kv.head_dim;
  const uint32_t group = a.num_heads / kv.kv_heads;
  std::vector<float> k(D), v(D);
  for (int64_t t = 0; t < a.num_tokens; ++t) {
    const int32_t n = a.context_len[t];
    for (uint32_t h = 0; h < a.num_heads; ++h) {
      const uint32_t kvh = h / group;
      const float* q = a.q + (t * a.num_heads + h) * D;
      std::vector<double> sc(n);
      double m = -INFINITY;
      for (int32_t j = 0; j < n; ++j) {
        const uint32_t blk = a.block_table[t][j / kv.block_size];
        kv_vector_to_f32(kv.k_dtype,
                         kv.k_head(blk, a.layer, kvh) + (j % kv.block_size) * kv.k_vector_bytes, D,
                         k.data(), 0);
        double d = 0;
        for (uint32_t i = 0; i < D; ++i) d += double(q[i]) * k[i];
        sc[j] = d * a.scale;
        m = std::max(m, sc[j]);
      }
      double sum = 0;
      for (auto& x : sc) sum += (x = std::exp(x - m));
      std::vector<double> acc(D, 0.0);
      for (int32_t j = 0; j < n; ++j) {
        const uint32_t blk = a.block_table[t][j / kv.block_size];
        kv_vector_to_f32(kv.v_dtype,
                         kv.v_head(blk, a.layer, kvh) + (j % kv.block_size) * kv.v_vector_bytes, D,
                         v.data(), 0);
        for (uint32_t i = 0; i < D; ++i) acc[i] += sc[j] / sum * v[i];
      }
      float* o = a.out + (t * a.num_heads + h) * D;
      for (uint32_t i = 0; i < D; ++i) o[i] = static_cast<float>(acc[i]);
    }
  }
}

}  // namespace kvs
#endif
