#include "kernels/trellis_forward.h"

#include <bit>
#include <cstddef>
#include <limits>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/trellis_forward.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace kvs {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#ifndef KVS_TRELLIS_UNROLL
#define KVS_TRELLIS_UNROLL _Pragma("GCC unroll 16")
#endif

// The table indices that spread the step's context minima m over the states: lane k of states
// vector j takes lane (j % 4) (L / 4) + k / 4 of m's vector j / 4 (its L / 4 contexts, each
// repeated four times), with idx[j % 4].
template <class DF>
using SpreadIndices = decltype(hn::SetTableIndices(DF(), static_cast<const int32_t*>(nullptr)));
template <class DF>
HWY_INLINE void SetSpreadIndices(DF df, SpreadIndices<DF>* idx) {
  const size_t L = hn::Lanes(df);
  HWY_ALIGN int32_t spread[hn::MaxLanes(df)];
  for (size_t r = 0; r < 4; ++r) {
    for (size_t k = 0; k < L; ++k) spread[k] = static_cast<int32_t>(r * (L / 4) + k / 4);
    idx[r] = hn::SetTableIndices(df, spread);
  }
}

// The back words are bit masks in memory order: bit t of a word is bit t % 8 of its byte t / 8.
static_assert(std::endian::native == std::endian::little);

// Targets with 16 float lanes (AVX-512): the 256 costs stay in 16 registers for the whole pass,
// so a step reads only the levels, and the four vectors of m never go to memory. The same
// operations in the same order as the loop below (and the scalar loop), so the same bits. Each
// compare's mask goes to the back words as it is (16 bits, bytes 2q and 2q + 1 of word a - 1).
template <class DF>
HWY_INLINE void ForwardInRegisters(DF df, const float* x, int context, float* cost,
                                   uint64_t* back) {
  const hn::RebindToSigned<DF> di;
  using VF = hn::Vec<DF>;
  constexpr size_t kL = 16, kVecs = kTrellisStates / kL, kCtxVecs = kTrellisContexts / kL;
  const float* levels = kTrellisLevelsF32.v;
  const auto inf = hn::Set(df, std::numeric_limits<float>::infinity());
  VF c[kVecs];
  {
    const auto x0 = hn::Set(df, x[0]);
    KVS_TRELLIS_UNROLL
    for (size_t j = 0; j < kVecs; ++j) {
      const auto d = hn::Sub(x0, hn::Load(df, levels + j * kL));
      c[j] = hn::Mul(d, d);
      if (context >= 0) {
        const auto high = hn::ShiftRight<2>(hn::Iota(di, static_cast<int32_t>(j * kL)));
        c[j] = hn::IfThenElse(hn::RebindMask(df, hn::Eq(high, hn::Set(di, context))), c[j], inf);
      }
    }
  }
  SpreadIndices<DF> idx[4];
  SetSpreadIndices(df, idx);
  for (uint32_t i = 1; i < kTrellisGroup; ++i) {
    auto* bk = reinterpret_cast<uint8_t*>(back + 3 * i);
    VF m[kCtxVecs];
    // Contexts 16 q .. 16 q + 15: their predecessors t + 64 a are the states of vector q + 4 a.
    KVS_TRELLIS_UNROLL
    for (size_t q = 0; q < kCtxVecs; ++q) {
      auto best = c[q];
      KVS_TRELLIS_UNROLL
      for (size_t a = 1; a < 4; ++a) {
        const auto lower = hn::Lt(c[q + kCtxVecs * a], best);
        best = hn::IfThenElse(lower, c[q + kCtxVecs * a], best);
        hn::StoreMaskBits(df, lower, bk + 8 * (a - 1) + 2 * q);
      }
      m[q] = best;
    }
    const auto xi = hn::Set(df, x[i]);
    KVS_TRELLIS_UNROLL
    for (size_t j = 0; j < kVecs; ++j) {
      const auto d = hn::Sub(xi, hn::Load(df, levels + j * kL));
      c[j] = hn::Add(hn::TableLookupLanes(m[j / 4], idx[j % 4]), hn::Mul(d, d));
    }
  }
  KVS_TRELLIS_UNROLL
  for (size_t j = 0; j < kVecs; ++j) hn::StoreU(c[j], df, cost + j * kL);
}

// States s in lanes. A step first takes, for each high-six-bits context t, the cheapest of the
// four states t + 64 a (the 64 contexts in 64 / L vectors, four loads each), then each state s
// adds its term to its context's cost m[s >> 2]: the lanes of one vector of states need
// L / 4 contexts each repeated four times, one table lookup from the vector of m that holds them.
void TrellisForwardAt(const float* x, int context, float* cost, uint64_t* back) {
#if HWY_TARGET == HWY_SCALAR
  trellis_forward_scalar(x, context, cost, back);
#else
  const hn::ScalableTag<float> df;
  const hn::RebindToSigned<decltype(df)> di;
  const size_t L = hn::Lanes(df);
  if (L < 4 || L > 16 || kTrellisContexts % L != 0)
    return trellis_forward_scalar(x, context, cost, back);
#if HWY_TARGET <= HWY_AVX3 && HWY_ARCH_X86
  if (L == 16) return ForwardInRegisters(df, x, context, cost, back);
#endif
  const float* levels = kTrellisLevelsF32.v;
  const auto inf = hn::Set(df, std::numeric_limits<float>::infinity());
  {
    const auto x0 = hn::Set(df, x[0]);
    for (size_t s = 0; s < kTrellisStates; s += L) {
      const auto d = hn::Sub(x0, hn::Load(df, levels + s));
      auto c = hn::Mul(d, d);
      if (context >= 0) {
        const auto high = hn::ShiftRight<2>(hn::Iota(di, static_cast<int32_t>(s)));
        c = hn::IfThenElse(hn::RebindMask(df, hn::Eq(high, hn::Set(di, context))), c, inf);
      }
      hn::StoreU(c, df, cost + s);
    }
  }
  SpreadIndices<decltype(df)> idx[4];
  SetSpreadIndices(df, idx);
  HWY_ALIGN float m[kTrellisContexts];
  for (uint32_t i = 1; i < kTrellisGroup; ++i) {
    uint64_t* bk = back + 3 * i;
    bk[0] = bk[1] = bk[2] = 0;
    for (size_t t = 0; t < kTrellisContexts; t += L) {
      auto best = hn::LoadU(df, cost + t);
      for (size_t a = 1; a < 4; ++a) {
        const auto c = hn::LoadU(df, cost + t + kTrellisContexts * a);
        const auto lower = hn::Lt(c, best);
        best = hn::IfThenElse(lower, c, best);
        uint8_t bits[8] = {};  // L <= 16 lanes: two bytes at most
        hn::StoreMaskBits(df, lower, bits);
        bk[a - 1] |= (uint64_t{bits[0]} | uint64_t{bits[1]} << 8) << t;
      }
      hn::Store(best, df, m + t);
    }
    const auto xi = hn::Set(df, x[i]);
    for (size_t s = 0, j = 0; s < kTrellisStates; s += L, ++j) {
      const auto spread_m = hn::TableLookupLanes(hn::Load(df, m + (j / 4) * L), idx[j % 4]);
      const auto d = hn::Sub(xi, hn::Load(df, levels + s));
      hn::StoreU(hn::Add(spread_m, hn::Mul(d, d)), df, cost + s);
    }
  }
#endif
}

}  // namespace HWY_NAMESPACE
}  // namespace kvs
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kvs {

HWY_EXPORT(TrellisForwardAt);

void trellis_forward(const float* x, int context, float* cost, uint64_t* back) {
  HWY_DYNAMIC_DISPATCH(TrellisForwardAt)(x, context, cost, back);
}

}  // namespace kvs
#endif
