// Weight matmul kernels (see matmul.h for the paths and their error bounds).
//  * integer path (Q8_0, Q4_0, Q4_1, Q4_K, Q6_K): the activation rows are quantized once per call
//    to int8 values (stored widened to int16) with one f32 scale per 32 elements, plus the exact
//    f32 sum of each block for the min terms. A weight block is unpacked to int16 once and
//    multiplied with the activation block of each token of the tile via ReorderWidenMulAccumulate
//    (pmaddwd: int16 x int16 -> int32 pair sums), summed to the block's exact int32; then, per
//    block in order, acc = fma(f32(isum), d_w * d_x, acc) and the min term acc = fma(m, s, acc):
//    matmul.h's arithmetic, the 8-bit GEMM's too.
//  * float path (F32, F16, BF16): weights converted to f32, FMA with x.
// Threads split output rows; each thread walks its rows once per tile of up to kTileT tokens, so
// the thread's weight rows stay cache-resident while the tiles of a prefill batch reuse them.

#include "kernels/matmul.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/check.h"
#include "core/half.h"
#include "kernels/dequantize.h"
#include "kernels/int8_matmul.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/matmul.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#ifndef KVS_KERNELS_MATMUL_ONCE
#define KVS_KERNELS_MATMUL_ONCE
namespace kvs::matmul_detail {

constexpr int64_t kRowGrain = 16;          // rows per parallel_for chunk (multiple of every tile)
constexpr int64_t kTileT = 4;              // tokens that share one load of a weight block
constexpr int64_t kPrefetchBytes = 16384;  // software prefetch distance of the decode kernel

// Types whose matmul quantizes the activation to int8 blocks (see matmul.h for the error bound).
constexpr bool uses_int_path(WeightType t) {
  return t == WeightType::kQ8_0 || t == WeightType::kQ4_0 || t == WeightType::kQ4_1 ||
         t == WeightType::kQ5_0 || t == WeightType::kQ4_K || t == WeightType::kQ6_K;
}

// Scratch of the calling thread: the quantized activation, reused across calls.
struct ActScratch {
  std::vector<int16_t> q;  // [T][K]
  std::vector<float> d;    // [T][K/32] scale of each block
  std::vector<float> s;    // [T][K/32] exact f32 sum of each block of x
  void reserve(int64_t T, int64_t K) {
    const auto nq = static_cast<size_t>(T * K), nb = static_cast<size_t>(T * K / 32);
    if (q.size() < nq) q.resize(nq);
    if (d.size() < nb) d.resize(nb), s.resize(nb);
  }
};
inline ActScratch& act_scratch() {
  thread_local ActScratch s;
  return s;
}

// Portable fallback for HWY_SCALAR (1-lane vectors cannot hold a widened pair): dequantize each
// row to f32 and dot in f32. Same contract as matmul().
void matmul_portable(const WeightMatrix& w, const float* x, int64_t T, float* y, ThreadPool& pool);

}  // namespace kvs::matmul_detail
#endif  // KVS_KERNELS_MATMUL_ONCE

HWY_BEFORE_NAMESPACE();
namespace kvs {
namespace HWY_NAMESPACE {
using namespace kvs::matmul_detail;  // NOLINT

#if HWY_TARGET == HWY_SCALAR
void MatmulImpl(const WeightMatrix& w, const float* x, int64_t T, float* y, ThreadPool& pool) {
  matmul_portable(w, x, T, y, pool);
}
#else
namespace hn = hwy::HWY_NAMESPACE;

using D16 = hn::ScalableTag<int16_t>;
using D32 = hn::Repartition<int32_t, D16>;
using DF = hn::Repartition<float, D16>;
using V16 = hn::Vec<D16>;
constexpr size_t kN16 = hn::MaxLanes(D16());
static_assert(kN16 <= 32 && 32 % kN16 == 0, "a 32-element block must fill whole vectors");
constexpr size_t kVecPerBlock = kN16 >= 32 ? 1 : 32 / kN16;

// ---------------------------------------------------------------- activation quantization
// x: [K] -> q: [K] int16 in [-127, 127], d/s: [K/32]. q = round(x / d), d = amax / 127.
HWY_INLINE void quantize_act_row(const float* HWY_RESTRICT x, int64_t K, int16_t* HWY_RESTRICT q,
                                 float* HWY_RESTRICT dq, float* HWY_RESTRICT sq) {
  const hn::ScalableTag<float> df;
  const hn::Rebind<int16_t, decltype(df)> d16h;
  constexpr size_t kNf = hn::MaxLanes(df);
  static_assert(32 % kNf == 0);
  for (int64_t b = 0; b < K / 32; ++b) {
    const float* xb = x + b * 32;
    auto vmax = hn::Zero(df);
    HWY_UNROLL(8)
    for (size_t i = 0; i < 32; i += kNf) vmax = hn::Max(vmax, hn::Abs(hn::LoadU(df, xb + i)));
    const float amax = hn::GetLane(hn::MaxOfLanes(df, vmax));
    const float d = amax / 127.0f;
    const float id = d > 0.0f ? 1.0f / d : 0.0f;
    dq[b] = d;
    const auto vid = hn::Set(df, id);
    auto qsum = hn::Zero(df);
    HWY_UNROLL(8)
    for (size_t i = 0; i < 32; i += kNf) {
      const auto qi = hn::NearestInt(hn::Mul(hn::LoadU(df, xb + i), vid));
      qsum = hn::Add(qsum, hn::ConvertTo(df, qi));
      hn::StoreU(hn::DemoteTo(d16h, qi), d16h, q + b * 32 + i);
    }
    // The min term uses the sum of the *quantized* block (d * sum q), not the exact sum: with
    // Q4_1/Q4_K weights w = d*q + m the activation rounding errors of the d*q part and of the m
    // part then cancel as they do in sum(w * x_quantized). With the exact sum the errors of the
    // large positive d*q part stood alone: 1.3% relative error instead of 0.3% on SmolLM2.
    sq[b] = d * hn::GetLane(hn::SumOfLanes(df, qsum));
  }
}

// ---------------------------------------------------------------- weight block unpacking
// Fills wv[0..kVecPerBlock) with the block's 32 integer weights in element order.
template <WeightType kType, class D>
HWY_INLINE void unpack_int_block(D d16, const uint8_t* HWY_RESTRICT qs, hn::Vec<D>* wv) {
  if constexpr (kType == WeightType::kQ5_0) {
    // Bit e of qh (the 4 bytes before qs) is bit 4 of element e. Scalar: this path runs only on
    // CPUs without AVX2 (kernels/int8_gemm.h has the fast one).
    uint32_t qh;
    std::memcpy(&qh, qs - 4, 4);
    HWY_ALIGN int16_t v[32];
    for (int j = 0; j < 16; ++j) {
      v[j] = static_cast<int16_t>(((qs[j] & 0x0F) | (((qh >> j) & 1) << 4)) - 16);
      v[j + 16] = static_cast<int16_t>(((qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4)) - 16);
    }
    HWY_UNROLL(8)
    for (size_t i = 0; i < kVecPerBlock; ++i) wv[i] = hn::Load(d16, v + i * kN16);
  } else if constexpr (kType == WeightType::kQ8_0) {
    const hn::Rebind<int8_t, D> d8;
    const auto* q8 = reinterpret_cast<const int8_t*>(qs);
    HWY_UNROLL(8)
    for (size_t i = 0; i < kVecPerBlock; ++i)
      wv[i] = hn::PromoteTo(d16, hn::LoadU(d8, q8 + i * kN16));
  } else if constexpr (hn::MaxLanes(D()) >= 32) {
    // 16 bytes -> 16 lo nibbles (elements 0..15) and 16 hi nibbles (16..31) in one vector.
    const hn::Half<hn::RebindToUnsigned<D> > du16h;
    const hn::Rebind<uint8_t, decltype(du16h)> d8h;
    const auto v = hn::PromoteTo(du16h, hn::LoadU(d8h, qs));
    const auto lo = hn::And(v, hn::Set(du16h, 0x0F));
    const auto hi = hn::ShiftRight<4>(v);
    wv[0] = hn::BitCast(d16, hn::Combine(hn::RebindToUnsigned<D>(), hi, lo));
    if constexpr (kType == WeightType::kQ4_0) wv[0] = hn::Sub(wv[0], hn::Set(d16, 8));
  } else {
    const hn::RebindToUnsigned<D> du16;
    const hn::Rebind<uint8_t, D> d8;
    constexpr size_t kHalf = kVecPerBlock / 2;
    HWY_UNROLL(8)
    for (size_t i = 0; i < kHalf; ++i) {
      const auto v = hn::PromoteTo(du16, hn::LoadU(d8, qs + i * kN16));
      wv[i] = hn::BitCast(d16, hn::And(v, hn::Set(du16, 0x0F)));
      wv[i + kHalf] = hn::BitCast(d16, hn::ShiftRight<4>(v));
      if constexpr (kType == WeightType::kQ4_0) {
        wv[i] = hn::Sub(wv[i], hn::Set(d16, 8));
        wv[i + kHalf] = hn::Sub(wv[i + kHalf], hn::Set(d16, 8));
      }
    }
  }
}

// Q6_K: the int16 vector of per-element scales for lanes i*kN16.. of a 32-element sub-block whose
// first 16 elements use sc[0] and last 16 use sc[1].
template <class D>
HWY_INLINE hn::Vec<D> sub_scales(D d16, const int8_t* sc, size_t i) {
  if constexpr (hn::MaxLanes(D()) >= 32) {
    const hn::Half<D> dh;
    return hn::Combine(d16, hn::Set(dh, sc[1]), hn::Set(dh, sc[0]));
  } else {
    return hn::Set(d16, sc[(i * kN16) / 16]);
  }
}

template <WeightType kType>
constexpr size_t kQsOffset = kType == WeightType::kQ4_1 ? 4 : (kType == WeightType::kQ5_0 ? 6 : 2);
template <WeightType kType>
constexpr size_t kBlockBytes = kType == WeightType::kQ8_0   ? 34
                               : kType == WeightType::kQ4_0 ? 18
                               : kType == WeightType::kQ5_0 ? 22
                                                            : 20;

// The quantized activation of a tile of tokens: token t's block b is q[t*K + 32b ..], with scale
// d[t*KB + b] and s[t*KB + b] = d * (sum of the rounded block).
struct ActTile {
  const int16_t* q;
  const float* d;
  const float* s;
  int64_t K, KB;
};

// The exact int32 sum of one unpacked weight block (int16 lanes wv) with activation block ab of
// token t, then the block's f32 step: acc = fma(f32(isum), dw * dx, acc) and, with a min term,
// acc = fma(m, s, acc). matmul.h's arithmetic: the 8-bit GEMM runs the same f32 operations.
template <bool kMin>
HWY_INLINE float block_step(const V16* HWY_RESTRICT wv, float dw, float m, int64_t ab, int t,
                            const ActTile& xa, float acc) {
  const D16 d16;
  const D32 d32;
  const int16_t* xb = xa.q + t * xa.K + ab * 32;
  auto s0 = hn::Zero(d32);
  auto s1 = hn::Zero(d32);
  HWY_UNROLL(8)
  for (size_t i = 0; i < kVecPerBlock; ++i)
    s0 = hn::ReorderWidenMulAccumulate(d32, wv[i], hn::LoadU(d16, xb + i * kN16), s0, s1);
  const auto isum = static_cast<float>(hn::GetLane(hn::SumOfLanes(d32, hn::Add(s0, s1))));
  acc = std::fma(isum, dw * xa.d[t * xa.KB + ab], acc);
  if constexpr (kMin) acc = std::fma(m, xa.s[t * xa.KB + ab], acc);
  return acc;
}

// Q8_0 / Q4_0 / Q4_1 / Q5_0 block b, for NT tokens.
template <WeightType kType, int NT>
HWY_INLINE void legacy_block(const uint8_t* HWY_RESTRICT row, int64_t b, const ActTile& xa,
                             float* HWY_RESTRICT acc) {
  const D16 d16;
  const uint8_t* blk = row + b * kBlockBytes<kType>;
  // d (and m for Q4_1) in one f16->f32 conversion (vcvtph2ps where available). For the other
  // types the second lane converts two bytes of qs (Q5_0: qh) and is unused.
  const hn::CappedTag<float, 2> df2;
  const hn::Rebind<hwy::float16_t, decltype(df2)> dh2;
  const auto dm = hn::PromoteTo(df2, hn::LoadU(dh2, reinterpret_cast<const hwy::float16_t*>(blk)));
  V16 wv[kVecPerBlock];
  unpack_int_block<kType>(d16, blk + kQsOffset<kType>, wv);
  const float dw = hn::GetLane(dm), m = hn::ExtractLane(dm, 1);
  HWY_UNROLL(8)
  for (int t = 0; t < NT; ++t)
    acc[t] = block_step<kType == WeightType::kQ4_1>(wv, dw, m, b, t, xa, acc[t]);
}

// Q4_K super-block sb (8 sub-blocks of 32): x = (d*sc_j) * q - (dmin*mn_j), q = 4-bit nibble.
// Sub-block j uses the low (j even) or high (j odd) nibbles of qs[32*(j/2) ..+32].
template <int NT>
HWY_INLINE void q4k_superblock(const uint8_t* HWY_RESTRICT row, int64_t sb, const ActTile& xa,
                               float* HWY_RESTRICT acc) {
  const D16 d16;
  const hn::RebindToUnsigned<D16> du16;
  const hn::Rebind<uint8_t, D16> d8;
  const uint8_t* blk = row + sb * 144;
  const hn::CappedTag<float, 2> df2;
  const hn::Rebind<hwy::float16_t, decltype(df2)> dh2;
  const auto dd = hn::PromoteTo(df2, hn::LoadU(dh2, reinterpret_cast<const hwy::float16_t*>(blk)));
  const float d = hn::GetLane(dd), dmin = hn::ExtractLane(dd, 1);
  const uint8_t* qs = blk + 16;
  HWY_UNROLL(8)
  for (int j = 0; j < 8; ++j) {
    int sc, mn;
    q4k_scale_min(j, blk + 4, &sc, &mn);
    V16 wv[kVecPerBlock];
    HWY_UNROLL(8)
    for (size_t i = 0; i < kVecPerBlock; ++i) {
      const auto v = hn::PromoteTo(du16, hn::LoadU(d8, qs + 32 * (j / 2) + i * kN16));
      wv[i] = hn::BitCast(d16, (j & 1) ? hn::ShiftRight<4>(v) : hn::And(v, hn::Set(du16, 0x0F)));
    }
    const float dw = d * static_cast<float>(sc), m = -dmin * static_cast<float>(mn);
    HWY_UNROLL(8)
    for (int t = 0; t < NT; ++t) acc[t] = block_step<true>(wv, dw, m, sb * 8 + j, t, xa, acc[t]);
  }
}

// Q6_K super-block sb: x = d * sc_k * (q - 32), 6-bit q (4 low bits in ql, 2 high bits in qh),
// one int8 scale per 16 elements. The int8 scale is folded into the int16 weights
// (|sc*(q-32)| <= 4096, so pmaddwd pair sums stay below 2^21).
template <int NT>
HWY_INLINE void q6k_superblock(const uint8_t* HWY_RESTRICT row, int64_t sb, const ActTile& xa,
                               float* HWY_RESTRICT acc) {
  const D16 d16;
  const hn::RebindToUnsigned<D16> du16;
  const hn::Rebind<uint8_t, D16> d8;
  const uint8_t* blk = row + sb * 210;
  const hn::CappedTag<float, 1> df1;
  const hn::Rebind<hwy::float16_t, decltype(df1)> dh1;
  const float dw = hn::GetLane(
      hn::PromoteTo(df1, hn::LoadU(dh1, reinterpret_cast<const hwy::float16_t*>(blk + 208))));
  const auto* scales = reinterpret_cast<const int8_t*>(blk + 192);
  HWY_UNROLL(8)
  for (int j = 0; j < 8; ++j) {
    const int h = j / 4, qd = j % 4;
    const uint8_t* ql = blk + h * 64 + (qd & 1) * 32;
    const uint8_t* qh = blk + 128 + h * 32;
    const int8_t* sc = scales + h * 8 + qd * 2;  // sc[0]: elements 0..15, sc[1]: 16..31
    V16 wv[kVecPerBlock];
    HWY_UNROLL(8)
    for (size_t i = 0; i < kVecPerBlock; ++i) {
      const auto lo = hn::PromoteTo(du16, hn::LoadU(d8, ql + i * kN16));
      const auto nib = qd < 2 ? hn::And(lo, hn::Set(du16, 0x0F)) : hn::ShiftRight<4>(lo);
      const auto hb =
          hn::And(hn::ShiftRightSame(hn::PromoteTo(du16, hn::LoadU(d8, qh + i * kN16)), 2 * qd),
                  hn::Set(du16, 3));
      const auto q = hn::Sub(hn::BitCast(d16, hn::Or(nib, hn::ShiftLeft<4>(hb))), hn::Set(d16, 32));
      wv[i] = hn::Mul(q, sub_scales(d16, sc, i));
    }
    HWY_UNROLL(8)
    for (int t = 0; t < NT; ++t)
      acc[t] = block_step<false>(wv, dw, 0.0f, sb * 8 + j, t, xa, acc[t]);
  }
}

// y[t*N] for t < NT = dot(weight row, token t) on the integer path: one f32 chain per token,
// the blocks in order, whatever NT is (batch invariance).
template <WeightType kType, int NT>
HWY_INLINE void int_row_tile(const uint8_t* HWY_RESTRICT row, const ActTile& xa,
                             float* HWY_RESTRICT y, int64_t N) {
  float acc[NT];
  HWY_UNROLL(8)
  for (int t = 0; t < NT; ++t) acc[t] = 0.0f;
  if constexpr (kType == WeightType::kQ4_K) {
    for (int64_t sb = 0; sb < xa.KB / 8; ++sb) q4k_superblock<NT>(row, sb, xa, acc);
  } else if constexpr (kType == WeightType::kQ6_K) {
    for (int64_t sb = 0; sb < xa.KB / 8; ++sb) q6k_superblock<NT>(row, sb, xa, acc);
  } else {
    for (int64_t b = 0; b < xa.KB; ++b) legacy_block<kType, NT>(row, b, xa, acc);
  }
  HWY_UNROLL(8)
  for (int t = 0; t < NT; ++t) y[t * N] = acc[t];
}

// Decode (one token): R rows at once, sharing each activation load, with the R rows' blocks
// prefetched as one linear region. Legacy block types only (the k-quants keep int_row_tile).
template <WeightType kType, int R>
HWY_INLINE void int_rows_decode(const uint8_t* const* HWY_RESTRICT rows, const ActTile& xa,
                                float* HWY_RESTRICT y) {
  const D16 d16;
  const D32 d32;
  const hn::CappedTag<float, 2> df2;
  const hn::Rebind<hwy::float16_t, decltype(df2)> dh2;
  constexpr bool kMin = kType == WeightType::kQ4_1;
  float acc[R];
  HWY_UNROLL(8)
  for (int r = 0; r < R; ++r) acc[r] = 0.0f;
  for (int64_t b = 0; b < xa.KB; ++b) {
    V16 xv[kVecPerBlock];
    HWY_UNROLL(8)
    for (size_t i = 0; i < kVecPerBlock; ++i) xv[i] = hn::LoadU(d16, xa.q + b * 32 + i * kN16);
    const float dx = xa.d[b], sx = xa.s[b];
    // The R rows are one contiguous region that is read as R interleaved short streams, which
    // the hardware prefetchers follow poorly once the matrix comes from DRAM (Q8_0 lm_head:
    // 38 -> 9.5 GB/s without this). Prefetch the same region linearly, kPrefetchBytes ahead.
    {
      const uint8_t* pf = rows[0] + kPrefetchBytes + b * (R * kBlockBytes<kType>);
      for (int64_t o = 0; o < R * kBlockBytes<kType>; o += 64) __builtin_prefetch(pf + o);
    }
    HWY_UNROLL(8)
    for (int r = 0; r < R; ++r) {
      const uint8_t* blk = rows[r] + b * kBlockBytes<kType>;
      const auto dm =
          hn::PromoteTo(df2, hn::LoadU(dh2, reinterpret_cast<const hwy::float16_t*>(blk)));
      V16 wv[kVecPerBlock];
      unpack_int_block<kType>(d16, blk + kQsOffset<kType>, wv);
      auto s0 = hn::Zero(d32);
      auto s1 = hn::Zero(d32);
      HWY_UNROLL(8)
      for (size_t i = 0; i < kVecPerBlock; ++i)
        s0 = hn::ReorderWidenMulAccumulate(d32, wv[i], xv[i], s0, s1);
      const auto isum = static_cast<float>(hn::GetLane(hn::SumOfLanes(d32, hn::Add(s0, s1))));
      acc[r] = std::fma(isum, hn::GetLane(dm) * dx, acc[r]);
      if constexpr (kMin) acc[r] = std::fma(hn::ExtractLane(dm, 1), sx, acc[r]);
    }
  }
  HWY_UNROLL(8)
  for (int r = 0; r < R; ++r) y[r] = acc[r];
}

// ---------------------------------------------------------------- float path
template <WeightType kType>
HWY_INLINE hn::Vec<DF> load_w(DF df, const uint8_t* HWY_RESTRICT p, int64_t k) {
  if constexpr (kType == WeightType::kF16) {
    const hn::Rebind<hwy::float16_t, DF> dh;
    return hn::PromoteTo(df, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(p) + k));
  } else if constexpr (kType == WeightType::kBF16) {
    const hn::Rebind<uint16_t, DF> du16;
    const hn::RebindToUnsigned<DF> du32;
    const auto u = hn::PromoteTo(du32, hn::LoadU(du16, reinterpret_cast<const uint16_t*>(p) + k));
    return hn::BitCast(df, hn::ShiftLeft<16>(u));
  } else {
    return hn::LoadU(df, reinterpret_cast<const float*>(p) + k);
  }
}

// acc[t] += w[0..n) . x_t[0..n), n a multiple of the f32 lane count.
template <WeightType kType, int NT>
HWY_INLINE void float_dot_span(const uint8_t* HWY_RESTRICT w, const float* HWY_RESTRICT x,
                               int64_t K, int64_t n, hn::Vec<DF>* acc0, hn::Vec<DF>* acc1) {
  const DF df;
  constexpr int64_t kNf = static_cast<int64_t>(hn::MaxLanes(df));
  int64_t k = 0;
  for (; k + 2 * kNf <= n; k += 2 * kNf) {
    const auto w0 = load_w<kType>(df, w, k);
    const auto w1 = load_w<kType>(df, w, k + kNf);
    HWY_UNROLL(8)
    for (int t = 0; t < NT; ++t) {
      acc0[t] = hn::MulAdd(w0, hn::LoadU(df, x + t * K + k), acc0[t]);
      acc1[t] = hn::MulAdd(w1, hn::LoadU(df, x + t * K + k + kNf), acc1[t]);
    }
  }
  for (; k + kNf <= n; k += kNf) {
    const auto w0 = load_w<kType>(df, w, k);
    HWY_UNROLL(8)
    for (int t = 0; t < NT; ++t) acc0[t] = hn::MulAdd(w0, hn::LoadU(df, x + t * K + k), acc0[t]);
  }
}

template <WeightType kType, int NT>
HWY_INLINE void float_row_tile(const uint8_t* HWY_RESTRICT row, const float* HWY_RESTRICT x,
                               int64_t K, float* HWY_RESTRICT y, int64_t N) {
  const DF df;
  constexpr int64_t kNf = static_cast<int64_t>(hn::MaxLanes(df));
  hn::Vec<DF> acc0[NT], acc1[NT];
  HWY_UNROLL(8)
  for (int t = 0; t < NT; ++t) acc0[t] = hn::Zero(df), acc1[t] = hn::Zero(df);
  float tail[NT] = {};
  {
    const int64_t main = K / kNf * kNf;
    float_dot_span<kType, NT>(row, x, K, main, acc0, acc1);
    if (main < K) {
      HWY_ALIGN float buf[64];
      for (int64_t k0 = main; k0 < K; k0 += 64) {
        const int64_t n = std::min<int64_t>(64, K - k0);
        const auto* src = row + k0 * static_cast<int64_t>(weight_type_info(kType).block_bytes);
        dequantize_row_reference(kType, src, buf, n);
        HWY_UNROLL(8)
        for (int t = 0; t < NT; ++t)
          for (int64_t k = 0; k < n; ++k) tail[t] += buf[k] * x[t * K + k0 + k];
      }
    }
  }
  HWY_UNROLL(8)
  for (int t = 0; t < NT; ++t)
    y[t * N] = hn::GetLane(hn::SumOfLanes(df, hn::Add(acc0[t], acc1[t]))) + tail[t];
}

// ---------------------------------------------------------------- drivers
template <WeightType kType, int NT>
HWY_NOINLINE void rows_tile(const WeightMatrix& w, int64_t n0, int64_t n1, const float* x,
                            const ActScratch* act, int64_t t0, float* y) {
  const auto* base = static_cast<const uint8_t*>(w.data);
  const int64_t K = w.cols, N = w.rows;
  int64_t n = n0;
  if constexpr (NT == 1 && (kType == WeightType::kQ8_0 || kType == WeightType::kQ4_0 ||
                            kType == WeightType::kQ4_1 || kType == WeightType::kQ5_0)) {
    // Rows per pass: 4 fit the 32 vector registers of AVX-512, 2 the 16 of AVX2/SSE.
    constexpr int R = kN16 >= 32 ? 4 : 2;
    const int64_t KB = K / 32;
    const ActTile xa{act->q.data() + t0 * K, act->d.data() + t0 * KB, act->s.data() + t0 * KB, K,
                     KB};
    for (; n + R <= n1; n += R) {
      const uint8_t* rows[R];
      HWY_UNROLL(8)
      for (int r = 0; r < R; ++r) rows[r] = base + (n + r) * static_cast<int64_t>(w.row_bytes);
      int_rows_decode<kType, R>(rows, xa, y + t0 * N + n);
    }
  }
  for (; n < n1; ++n) {
    const uint8_t* row = base + n * static_cast<int64_t>(w.row_bytes);
    if constexpr (uses_int_path(kType)) {
      const int64_t KB = K / 32;
      const ActTile xa{act->q.data() + t0 * K, act->d.data() + t0 * KB, act->s.data() + t0 * KB, K,
                       KB};
      int_row_tile<kType, NT>(row, xa, y + t0 * N + n, N);
    } else {
      float_row_tile<kType, NT>(row, x + t0 * K, K, y + t0 * N + n, N);
    }
  }
}

template <WeightType kType>
void matmul_typed(const WeightMatrix& w, const float* x, int64_t T, float* y, ThreadPool& pool) {
  const ActScratch* act = nullptr;
  if constexpr (uses_int_path(kType)) {
    ActScratch& s = act_scratch();
    s.reserve(T, w.cols);
    const int64_t KB = w.cols / 32;
    for (int64_t t = 0; t < T; ++t)
      quantize_act_row(x + t * w.cols, w.cols, s.q.data() + t * w.cols, s.d.data() + t * KB,
                       s.s.data() + t * KB);
    act = &s;
  }
  pool.parallel_for(static_cast<size_t>(w.rows), kRowGrain, [&](size_t begin, size_t end, int) {
    const auto n0 = static_cast<int64_t>(begin), n1 = static_cast<int64_t>(end);
    for (int64_t t0 = 0; t0 < T; t0 += kTileT) {
      switch (std::min<int64_t>(kTileT, T - t0)) {
        case 1: rows_tile<kType, 1>(w, n0, n1, x, act, t0, y); break;
        case 2: rows_tile<kType, 2>(w, n0, n1, x, act, t0, y); break;
        case 3: rows_tile<kType, 3>(w, n0, n1, x, act, t0, y); break;
        default: rows_tile<kType, 4>(w, n0, n1, x, act, t0, y); break;
      }
    }
  });
}

void MatmulImpl(const WeightMatrix& w, const float* x, int64_t T, float* y, ThreadPool& pool) {
  switch (w.type) {
    case WeightType::kF32: return matmul_typed<WeightType::kF32>(w, x, T, y, pool);
    case WeightType::kF16: return matmul_typed<WeightType::kF16>(w, x, T, y, pool);
    case WeightType::kBF16: return matmul_typed<WeightType::kBF16>(w, x, T, y, pool);
    case WeightType::kQ8_0: return matmul_typed<WeightType::kQ8_0>(w, x, T, y, pool);
    case WeightType::kQ4_0: return matmul_typed<WeightType::kQ4_0>(w, x, T, y, pool);
    case WeightType::kQ4_1: return matmul_typed<WeightType::kQ4_1>(w, x, T, y, pool);
    case WeightType::kQ4_K: return matmul_typed<WeightType::kQ4_K>(w, x, T, y, pool);
    case WeightType::kQ6_K: return matmul_typed<WeightType::kQ6_K>(w, x, T, y, pool);
    case WeightType::kQ5_0: return matmul_typed<WeightType::kQ5_0>(w, x, T, y, pool);
  }
}
#endif  // HWY_TARGET == HWY_SCALAR

}  // namespace HWY_NAMESPACE
}  // namespace kvs
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kvs {

HWY_EXPORT(MatmulImpl);

void matmul(const WeightMatrix& w, const float* x, int64_t T, float* y, ThreadPool& pool) {
  KVS_CHECK(w.row_bytes == weight_row_bytes(w.type, static_cast<uint64_t>(w.cols)));
  KVS_CHECK(w.cols % weight_type_info(w.type).block_elems == 0);
  KVS_CHECK(T >= 1);
  if (w.rows == 0) return;
  if (int8_matmul(w, x, T, y, pool)) return;
  HWY_DYNAMIC_DISPATCH(MatmulImpl)(w, x, T, y, pool);
}

void matmul_group(std::span<const MatmulOutput> outputs, const float* x, int64_t T,
                  ThreadPool& pool) {
  if (outputs.empty()) return;
  bool uniform = true;
  for (const MatmulOutput& o : outputs) {
    KVS_CHECK(o.w->row_bytes == weight_row_bytes(o.w->type, static_cast<uint64_t>(o.w->cols)));
    KVS_CHECK(o.w->cols % weight_type_info(o.w->type).block_elems == 0);
    uniform = uniform && o.w->type == outputs[0].w->type && o.w->cols == outputs[0].w->cols;
  }
  KVS_CHECK(T >= 1);
  if (uniform && outputs.size() <= kMaxMatmulGroup && int8_matmul_group(outputs, x, T, pool))
    return;
  for (const MatmulOutput& o : outputs) matmul(*o.w, x, T, o.y, pool);
}

void matmul_gated(const WeightMatrix& gate, const WeightMatrix& up, GateActivation act,
                  const float* x, int64_t T, float* out, float* up_scratch, ThreadPool& pool) {
  KVS_CHECK(gate.type == up.type && gate.cols == up.cols && gate.rows == up.rows);
  KVS_CHECK(gate.row_bytes == weight_row_bytes(gate.type, static_cast<uint64_t>(gate.cols)));
  KVS_CHECK(gate.cols % weight_type_info(gate.type).block_elems == 0);
  KVS_CHECK(T >= 1);
  if (int8_matmul_gated(gate, up, act, x, T, out, pool)) return;
  const std::array<MatmulOutput, 2> gate_up = {{{&gate, out}, {&up, up_scratch}}};
  matmul_group(gate_up, x, T, pool);
  gated_activation(act, out, up_scratch, T * gate.rows, out);
}

namespace matmul_detail {
void matmul_portable(const WeightMatrix& w, const float* x, int64_t T, float* y, ThreadPool& pool) {
  const auto* base = static_cast<const uint8_t*>(w.data);
  pool.parallel_for(static_cast<size_t>(w.rows), kRowGrain, [&](size_t begin, size_t end, int) {
    thread_local std::vector<float> row;
    if (row.size() < static_cast<size_t>(w.cols)) row.resize(static_cast<size_t>(w.cols));
    for (size_t n = begin; n < end; ++n) {
      dequantize_row(w.type, base + n * w.row_bytes, row.data(), w.cols);
      for (int64_t t = 0; t < T; ++t) {
        const float* xt = x + t * w.cols;
        float s = 0;
        for (int64_t k = 0; k < w.cols; ++k) s += row[k] * xt[k];
        y[t * w.rows + static_cast<int64_t>(n)] = s;
      }
    }
  });
}
}  // namespace matmul_detail

namespace {
void matmul_reference_rows(const WeightMatrix& w, const float* x, int64_t T, float* y, int64_t n0,
                           int64_t n1) {
  std::vector<float> row(static_cast<size_t>(w.cols));
  const auto* base = static_cast<const uint8_t*>(w.data);
  for (int64_t n = n0; n < n1; ++n) {
    dequantize_row_reference(w.type, base + n * w.row_bytes, row.data(), w.cols);
    for (int64_t t = 0; t < T; ++t) {
      const float* xt = x + t * w.cols;
      double s = 0;
      for (int64_t k = 0; k < w.cols; ++k) s += static_cast<double>(row[k]) * xt[k];
      y[t * w.rows + n] = static_cast<float>(s);
    }
  }
}
}  // namespace

void matmul_reference(const WeightMatrix& w, const float* x, int64_t T, float* y) {
  KVS_CHECK(w.row_bytes == weight_row_bytes(w.type, static_cast<uint64_t>(w.cols)));
  matmul_reference_rows(w, x, T, y, 0, w.rows);
}

void matmul_reference(const WeightMatrix& w, const float* x, int64_t T, float* y,
                      ThreadPool& pool) {
  KVS_CHECK(w.row_bytes == weight_row_bytes(w.type, static_cast<uint64_t>(w.cols)));
  pool.parallel_for(static_cast<size_t>(w.rows), 64, [&](size_t n0, size_t n1, int) {
    matmul_reference_rows(w, x, T, y, static_cast<int64_t>(n0), static_cast<int64_t>(n1));
  });
}

}  // namespace kvs
#endif  // HWY_ONCE
