// The value pass of paged attention (one copy per SIMD target): the softmax weights of a range of
// keys times their V vectors, summed for NG query heads, each V vector converted once for all of
// them. Included by paged_attention.cpp after kernels/attention_key_scores-inl.h (RangeArgs),
// once per target.

// Per-target include guard (Highway's convention for -inl headers).
#if defined(KVS_KERNELS_ATTENTION_VALUES_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef KVS_KERNELS_ATTENTION_VALUES_INL_H_
#undef KVS_KERNELS_ATTENTION_VALUES_INL_H_
#else
#define KVS_KERNELS_ATTENTION_VALUES_INL_H_
#endif

#include <algorithm>
#include <cstdint>

#include <hwy/highway.h>

#include "kernels/paged_attention_args.h"

HWY_BEFORE_NAMESPACE();
namespace kvs {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// DF, VF and the format readers (Read*) come from kernels/kv_readers-inl.h, RangeArgs from
// kernels/attention_key_scores-inl.h.

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
      KVS_UNROLL
      for (int g = 0; g < NG; ++g) w[g] = hn::Set(df, p[g * len]);
      KVS_UNROLL
      for (int c = 0; c < NC; ++c) {
        VF x;
        if constexpr (!R::kGrouped) {
          x = R::Load(df, v, (c0 + c) * L);  // the vector's scale is already in p (ScaleWeights)
        } else {
          const size_t e = (c0 + c) * L;
          const uint8_t* gp = v + (e / R::kGroupElems) * R::kGroupBytes;
          x = hn::Mul(R::Load(df, gp, e % R::kGroupElems), hn::Set(df, R::Scale(gp)));
        }
        KVS_UNROLL
        for (int g = 0; g < NG; ++g) acc[g][c] = hn::MulAdd(w[g], x, acc[g][c]);
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

}  // namespace HWY_NAMESPACE
}  // namespace kvs
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
