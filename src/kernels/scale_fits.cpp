#include "kernels/scale_fits.h"

#include <algorithm>
#include <cstddef>

#include "core/check.h"
#include "core/round_even.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/scale_fits.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace kvs {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// One candidate per float lane; each double sum in two vectors, the lanes' lower and upper
// halves. Each operation is the scalar loop's, in the same order (quant/scale_fits.cpp).
template <ScaleLevels kLevels, bool kSums>
void FitsIn(const float* x, const float* d, uint32_t k, ScaleFit* out) {
#if HWY_TARGET == HWY_SCALAR
  scale_fits_scalar(kLevels, x, d, k, kSums, out);
#else
  const hn::ScalableTag<float> df;
  const hn::Half<decltype(df)> dh;
  const hn::Repartition<double, decltype(df)> dd;
  using VF = hn::Vec<decltype(df)>;
  using VD = hn::Vec<decltype(dd)>;
  const size_t L = hn::Lanes(df), H = L / 2;
  constexpr bool kInt4 = kLevels == ScaleLevels::kInt4;
  const float top = kLevels == ScaleLevels::kLowBit3 ? 7.0f : 3.0f;
  HWY_ALIGN float dl[hn::MaxLanes(df)];
  HWY_ALIGN float worst[hn::MaxLanes(df)];
  HWY_ALIGN float lsum[hn::MaxLanes(df)];
  HWY_ALIGN double sums[2][hn::MaxLanes(df)];  // err, xl: lower half then upper half
  for (uint32_t c0 = 0; c0 < k; c0 += static_cast<uint32_t>(L)) {
    const size_t n = std::min<size_t>(L, k - c0);
    std::fill(dl, dl + L, 0.0f);
    std::copy(d + c0, d + c0 + n, dl);
    const VF vd = hn::Load(df, dl);
    const VF zero = hn::Zero(df);
    // int4: 1 / d where d != 0; the low-bit codes: 0.5 / d where d > 0; else 0.
    const VF inv = kInt4 ? hn::IfThenElseZero(hn::Ne(vd, zero), hn::Div(hn::Set(df, 1.0f), vd))
                         : hn::IfThenElseZero(hn::Gt(vd, zero), hn::Div(hn::Set(df, 0.5f), vd));
    // A product of two floats is exact in double, so a fused multiply-add rounds once, as the
    // scalar loop's add does; sum l^2 is an integer below 2^12, exact in float.
    VD err[2] = {hn::Zero(dd), hn::Zero(dd)}, xl[2] = {hn::Zero(dd), hn::Zero(dd)};
    VF ll = zero, vworst = zero;
    for (uint32_t i = 0; i < kScaleFitGroup; ++i) {
      const VF xi = hn::Set(df, x[i]);
      VF l;
      if constexpr (kInt4) {  // round_even(clamp(x / d, -8, 7)), core/round_even.h in lanes
        const VF magic = hn::Set(df, kRoundEvenShift);
        const VF v = hn::Min(hn::Max(hn::Mul(xi, inv), hn::Set(df, -8.0f)), hn::Set(df, 7.0f));
        l = hn::Sub(hn::Add(v, magic), magic);
      } else {  // c = clamp(floor(x / 2d + (top + 1) / 2), 0, top); the level 2c - top
        const VF c = hn::Min(
            hn::Max(hn::Floor(hn::Add(hn::Mul(xi, inv), hn::Set(df, 0.5f * (top + 1.0f)))), zero),
            hn::Set(df, top));
        l = hn::Sub(hn::Mul(hn::Set(df, 2.0f), c), hn::Set(df, top));
      }
      const VF e = hn::Sub(xi, hn::Mul(vd, l));
      vworst = hn::Max(vworst, hn::Abs(e));
      const VD eh[2] = {hn::PromoteTo(dd, hn::LowerHalf(dh, e)),
                        hn::PromoteTo(dd, hn::UpperHalf(dh, e))};
      for (int h = 0; h < 2; ++h) err[h] = hn::MulAdd(eh[h], eh[h], err[h]);
      if constexpr (kSums) {
        const VD xd = hn::Set(dd, double(x[i]));
        const VD lh[2] = {hn::PromoteTo(dd, hn::LowerHalf(dh, l)),
                          hn::PromoteTo(dd, hn::UpperHalf(dh, l))};
        for (int h = 0; h < 2; ++h) xl[h] = hn::MulAdd(xd, lh[h], xl[h]);
        ll = hn::MulAdd(l, l, ll);
      }
    }
    hn::Store(vworst, df, worst);
    hn::Store(ll, df, lsum);
    for (int h = 0; h < 2; ++h) {
      hn::Store(err[h], dd, sums[0] + h * H);
      hn::Store(xl[h], dd, sums[1] + h * H);
    }
    for (size_t j = 0; j < n; ++j)
      out[c0 + j] = {.err = sums[0][j], .worst = worst[j], .xl = sums[1][j], .ll = lsum[j]};
  }
#endif
}

template <ScaleLevels kLevels>
void FitsOf(const float* x, const float* d, uint32_t k, bool refit_sums, ScaleFit* out) {
  if (refit_sums) return FitsIn<kLevels, true>(x, d, k, out);
  FitsIn<kLevels, false>(x, d, k, out);
}

void ScaleFitsAt(ScaleLevels levels, const float* x, const float* d, uint32_t k, bool refit_sums,
                 ScaleFit* out) {
  switch (levels) {
    case ScaleLevels::kInt4: return FitsOf<ScaleLevels::kInt4>(x, d, k, refit_sums, out);
    case ScaleLevels::kLowBit2: return FitsOf<ScaleLevels::kLowBit2>(x, d, k, refit_sums, out);
    case ScaleLevels::kLowBit3: return FitsOf<ScaleLevels::kLowBit3>(x, d, k, refit_sums, out);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace kvs
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kvs {

HWY_EXPORT(ScaleFitsAt);

void scale_fits(ScaleLevels levels, const float* x, const float* d, uint32_t k, bool refit_sums,
                ScaleFit* out) {
  KVS_CHECK(k <= kMaxScaleFits);
  HWY_DYNAMIC_DISPATCH(ScaleFitsAt)(levels, x, d, k, refit_sums, out);
}

}  // namespace kvs
#endif
